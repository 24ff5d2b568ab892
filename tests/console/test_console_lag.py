"""A group's page in a real browser: the lag rises while nothing consumes, falls to 0 once a
consumer commits, and the console's own samples draw it as a plotly chart."""

from __future__ import annotations

from pathlib import Path

from console_browser import reload_until, text_of, wait
from selenium.webdriver.common.by import By

from spark_mq import Admin, Consumer, Producer, TopicPartition

GROUP = "billing"
TOPIC = "invoices"


def produce(mq_dir: Path, count: int) -> None:
    with Producer(path=mq_dir) as producer:
        for n in range(count):
            producer.send(TOPIC, value=f"invoice {n}".encode(), partition=0)
        producer.flush()


def chart_totals(browser) -> list[int]:
    """The total-lag line of the chart, as plotly holds it in the page."""
    values = browser.execute_script(
        "const c = document.getElementById('lag-chart'); return c && c.data ? c.data[0].y : [];"
    )
    return [int(v) for v in values]


def test_lag_rises_then_falls_to_zero_after_a_commit(
    browser, console, admin: Admin, mq_dir: Path
) -> None:
    admin.create_topic(TOPIC, partitions=1)
    # The group starts at the beginning with nothing to read.
    admin.alter_group_offsets(GROUP, {TopicPartition(TOPIC, 0): 0})
    url = f"{console.url}/group?id={GROUP}"

    produce(mq_dir, 5)
    reload_until(browser, url, lambda: text_of(browser, "#total-lag") == "5")
    assert text_of(browser, "#group-state") == "Empty"
    lag_cells = browser.find_elements(By.CSS_SELECTOR, "#lag td.lag")
    assert [c.text for c in lag_cells] == ["5"]

    produce(mq_dir, 5)
    # The live table says 10 at once; the chart shows it after the sampler's next sample.
    reload_until(browser, url, lambda: 10 in chart_totals(browser))
    assert text_of(browser, "#total-lag") == "10"
    # plotly drew the chart: its SVG is in the page.
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#lag-chart svg.main-svg"))
    totals = chart_totals(browser)
    assert 5 in totals and totals.index(5) < totals.index(10)

    with Consumer(
        path=mq_dir, group_id=GROUP, enable_auto_commit=False, auto_offset_reset="earliest"
    ) as consumer:
        consumer.subscribe([TOPIC])
        read = 0
        for _ in range(200):
            read += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
            if read >= 10:
                break
        assert read == 10
        consumer.commit()

    reload_until(
        browser, url, lambda: chart_totals(browser)[-1:] == [0] and 10 in chart_totals(browser)
    )
    assert text_of(browser, "#total-lag") == "0"
