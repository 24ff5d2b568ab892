"""The console's admin actions in a real browser: refused (403) by a read-only console,
done by one started with allow_admin after their confirmation page; forms without the
console's CSRF token and deletes without the exact name typed in are refused."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from console_browser import text_of, wait
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from spark_mq import Admin, Consumer, Producer, TopicPartition
from spark_mq.console.server import ConsoleServer


@pytest.fixture(scope="module")
def admin_console(start_console: Callable[..., ConsoleServer], mq_dir: Path) -> ConsoleServer:
    return start_console(path=str(mq_dir), allow_admin=True)


def post(url: str, fields: dict[str, str]) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()
    try:
        with urllib.request.urlopen(url, data=data, timeout=60) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_read_only_console_refuses_every_action(browser, console, admin: Admin) -> None:
    admin.create_topic("kept", partitions=1)
    for path in (
        "/topics/kept/delete",
        "/group/reset-offsets?id=some-group",
        "/transaction/abort?id=some-txn",
    ):
        browser.get(console.url + path)
        assert "Start it with --allow-admin" in text_of(browser, "#error-message"), path
        status, _ = post(console.url + path, {"confirm_name": "kept"})
        assert status == 403, path
    assert "kept" in admin.list_topics()
    # No admin links on the pages of a read-only console.
    browser.get(f"{console.url}/topics/kept")
    wait(browser).until(lambda d: d.find_elements(By.ID, "partitions"))
    assert not browser.find_elements(By.LINK_TEXT, "Delete…")


def test_delete_topic_after_typing_its_name(browser, admin_console, admin: Admin) -> None:
    admin.create_topic("doomed", partitions=2)
    browser.get(f"{admin_console.url}/topics/doomed")
    wait(browser).until(lambda d: d.find_elements(By.LINK_TEXT, "Delete…"))[0].click()

    # A wrong name deletes nothing.
    wait(browser).until(lambda d: d.find_elements(By.ID, "confirm-name"))[0].send_keys("doome")
    browser.find_element(By.ID, "confirm").click()
    assert "type the topic's exact name" in text_of(browser, "#error-message")
    assert "doomed" in admin.list_topics()

    # A form without the console's token is refused.
    status, body = post(f"{admin_console.url}/topics/doomed/delete", {"confirm_name": "doomed"})
    assert status == 403 and "token" in body
    assert "doomed" in admin.list_topics()

    browser.get(f"{admin_console.url}/topics/doomed/delete")
    wait(browser).until(lambda d: d.find_elements(By.ID, "confirm-name"))[0].send_keys("doomed")
    browser.find_element(By.ID, "confirm").click()
    assert text_of(browser, "#done-message") == "Deleted topic doomed and all its data."
    assert "doomed" not in admin.list_topics()


def test_reset_offsets_of_an_empty_group(browser, admin_console, admin: Admin, mq_dir) -> None:
    with Producer(path=mq_dir) as producer:
        for n in range(7):
            producer.send("ledger", value=f"entry {n}".encode(), partition=0)
        producer.flush()
    tp = TopicPartition("ledger", 0)
    admin.alter_group_offsets("auditors", {tp: 2})

    browser.get(f"{admin_console.url}/group?id=auditors")
    wait(browser).until(lambda d: d.find_elements(By.ID, "reset-link"))[0].click()
    form = wait(browser).until(lambda d: d.find_elements(By.ID, "confirm-form"))[0]
    Select(form.find_element(By.NAME, "topic")).select_by_visible_text("ledger")
    Select(form.find_element(By.NAME, "target")).select_by_visible_text("latest")
    browser.find_element(By.ID, "confirm").click()
    assert text_of(browser, "#done-message").startswith("Reset the offsets of group auditors")
    assert admin.list_group_offsets("auditors")[tp].offset == 7


def test_abort_a_hanging_transaction(browser, admin_console, admin: Admin, mq_dir) -> None:
    producer = Producer(path=mq_dir, transactional_id="stuck-writer")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("payments", value=b"never committed", partition=0)
        producer.flush()
        assert admin.describe_transactions(["stuck-writer"])[0].state == "Ongoing"

        browser.get(f"{admin_console.url}/transactions")
        row = wait(browser).until(
            lambda d: d.find_elements(By.XPATH, "//tr[td[text()='stuck-writer']]")
        )[0]
        row.find_element(By.LINK_TEXT, "Abort…").click()
        wait(browser).until(lambda d: d.find_elements(By.ID, "confirm"))[0].click()
        assert text_of(browser, "#done-message") == "Aborted the transaction of stuck-writer."
        assert admin.describe_transactions(["stuck-writer"])[0].state != "Ongoing"
    finally:
        producer.close()


def test_reset_is_refused_while_the_group_has_members(
    browser, admin_console, admin: Admin, mq_dir
) -> None:
    admin.create_topic("busy", partitions=1)
    with Consumer(path=mq_dir, group_id="live-readers", enable_auto_commit=False) as consumer:
        consumer.subscribe(["busy"])
        for _ in range(300):
            consumer.poll(timeout_ms=100)
            if consumer.assignment():
                break
        assert consumer.assignment() == {TopicPartition("busy", 0)}
        consumer.commit({TopicPartition("busy", 0): 0})

        browser.get(f"{admin_console.url}/group/reset-offsets?id=live-readers")
        assert "can only be reset while it has none" in text_of(browser, "p.error")
        assert not browser.find_elements(By.ID, "confirm-form")
        # Posting the form anyway (with the token) is refused by the console, 409.
        status, body = post(
            f"{admin_console.url}/group/reset-offsets?id=live-readers",
            {
                "csrf_token": admin_console.context.csrf_token,
                "topic": "busy",
                "target": "latest",
            },
        )
        assert status == 409 and "stop its consumers" in body
    assert admin.list_group_offsets("live-readers")[TopicPartition("busy", 0)].offset == 0
