"""The console's read-only pages in a real browser: topics and partitions, the topic
browser, the cluster page, and the error pages (unknown names, an unreachable broker)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Callable

from console_browser import text_of, wait
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions

from spark_mq import Admin, Producer
from spark_mq.console.log_sizes import format_bytes
from spark_mq.console.server import ConsoleServer


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_topics_page_lists_a_topic_with_its_partitions(browser, console, admin: Admin) -> None:
    admin.create_topic("orders", partitions=3)
    browser.get(f"{console.url}/topics")
    link = wait(browser).until(
        expected_conditions.element_to_be_clickable((By.LINK_TEXT, "orders"))
    )
    row = link.find_element(By.XPATH, "./ancestor::tr")
    assert row.find_elements(By.TAG_NAME, "td")[1].text == "3"
    link.click()
    assert text_of(browser, "h1") == "Topic orders"
    rows = browser.find_elements(By.CSS_SELECTOR, "#partitions tr")[1:]
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["0", "1", "2"]
    for row in rows:
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        # One broker: it leads every partition, is its one replica and is in sync.
        assert cells[1:4] == ["0", "0", "0"], cells


def test_cluster_page_shows_the_broker_and_the_controller(browser, console) -> None:
    browser.get(f"{console.url}/")
    assert text_of(browser, "#controller") == "0"
    rows = browser.find_elements(By.CSS_SELECTOR, "#brokers tr")[1:]
    assert len(rows) == 1
    assert "controller" in rows[0].text


def test_topic_browser_shows_key_value_and_headers(browser, console, mq_dir) -> None:
    with Producer(path=mq_dir) as producer:
        for n in range(30):
            producer.send(
                "browsed",
                key=f"customer-{n}".encode(),
                value=f'{{"amount": {n}, "note": "<b>{n}</b>"}}'.encode(),
                headers=[("trace-id", f"t{n}".encode())],
                partition=0,
            )
        producer.flush()
    browser.get(f"{console.url}/topics/browsed/browse?partition=0&format=json&limit=10")
    wait(browser).until(
        expected_conditions.presence_of_all_elements_located((By.CSS_SELECTOR, "tr.record"))
    )
    records = browser.find_elements(By.CSS_SELECTOR, "tr.record")
    assert len(records) == 10
    first = records[0]
    assert first.find_element(By.CSS_SELECTOR, "td.key").text == "customer-0"
    value = first.find_element(By.CSS_SELECTOR, "td.value").text
    # Shown as indented JSON, and the markup in the value is text, not HTML.
    assert '"amount": 0' in value
    assert "<b>0</b>" in value
    assert not browser.find_elements(By.CSS_SELECTOR, "td.value b")
    assert first.find_element(By.CSS_SELECTOR, "td.headers").text == "trace-id: t0"

    # The next page starts where this one ended.
    browser.find_element(By.ID, "next-page").click()
    wait(browser).until(expected_conditions.url_contains("offset=10"))
    keys = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "tr.record td.key")]
    assert keys == [f"customer-{n}" for n in range(10, 20)]

    # The topic page shows the size of the partition's segment files (a --path console).
    browser.get(f"{console.url}/topics/browsed")
    sizes = [
        e.text for e in wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "td.size"))
    ]
    on_disk = sum(f.stat().st_size for f in (mq_dir / "browsed-0").glob("*.log"))
    assert on_disk > 30 * 30  # 30 records, each value over 30 bytes
    assert sizes[0] == format_bytes(on_disk)

    # Hex shows the bytes.
    browser.get(f"{console.url}/topics/browsed/browse?partition=0&offset=29&format=hex")
    assert text_of(browser, "tr.record td.key") == b"customer-29".hex()


def test_topic_browser_from_a_time(browser, console, mq_dir) -> None:
    with Producer(path=mq_dir) as producer:
        producer.send("timed", value=b"old", partition=0, timestamp_ms=1_000_000)
        producer.send("timed", value=b"new", partition=0, timestamp_ms=2_000_000)
        producer.flush()
    # 1970-01-01T00:25:00Z is 1 500 000 ms: after the first record, before the second.
    browser.get(f"{console.url}/topics/timed/browse?partition=0&time=1970-01-01T00:25:00")
    assert text_of(browser, "tr.record td.value") == "new"
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.record")) == 1


def test_unknown_names_are_404_pages(browser, console, admin: Admin) -> None:
    admin.create_topic("two-partitions", partitions=2)
    for path, message in (
        ("/topics/no-such-topic", "topic 'no-such-topic' does not exist"),
        ("/group?id=no-such-group", "group 'no-such-group' does not exist"),
        ("/topics/two-partitions/browse?partition=7", "has no partition 7"),
    ):
        assert status_of(console.url + path) == 404, path
        browser.get(console.url + path)
        assert message in text_of(browser, "#error-message"), path


def test_an_unreachable_broker_is_a_page_naming_the_address(
    browser, start_console: Callable[..., ConsoleServer]
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    unreachable = start_console(bootstrap_servers=address, api_timeout_ms=1500)
    assert status_of(unreachable.url + "/topics") == 503
    browser.get(unreachable.url + "/topics")
    message = text_of(browser, "#error-message")
    assert f"could not reach the broker at {address}" in message
    assert "Traceback" not in browser.page_source


def test_transactions_page_shows_a_prepared_transaction(browser, console, mq_dir) -> None:
    """A two-phase transaction held Prepared is listed with its state and when it was
    prepared; once committed it leaves the open ones."""
    producer = Producer(path=mq_dir, transactional_id="job-7-task-1")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("two-phase", value=b"held", partition=0)
        handle = producer.prepare_transaction()
    finally:
        producer.close()
    browser.get(f"{console.url}/transactions")
    row = wait(browser).until(
        lambda d: d.find_elements(By.XPATH, "//tr[td[text()='job-7-task-1']]")
    )[0]
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "Prepared"
    assert cells[6].startswith("20") and cells[6].endswith("Z"), cells  # prepared at
    assert cells[7] == "two-phase-0"
    with Admin(path=mq_dir) as admin:
        admin.complete_prepared_transactions([handle], commit=True)
    browser.get(f"{console.url}/transactions")
    wait(browser).until(lambda d: d.find_elements(By.TAG_NAME, "h1"))
    assert not browser.find_elements(
        By.XPATH, "//table[@id='open-transactions']//td[text()='job-7-task-1']"
    )
