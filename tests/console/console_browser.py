"""Waiting in the browser: the helpers of the console's browser tests (explicit waits, no
sleeps)."""

from __future__ import annotations

from collections.abc import Callable

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

#: How long a browser wait may take before the test fails (the machine may be loaded).
WAIT_S = 30.0


def wait(driver: webdriver.Chrome) -> WebDriverWait[webdriver.Chrome]:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.2)


def text_of(driver: webdriver.Chrome, css: str) -> str:
    """The text of the element ``css`` once it is on the page."""
    element = wait(driver).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))
    )
    return str(element.text)


def reload_until(driver: webdriver.Chrome, url: str, check: Callable[[], bool]) -> None:
    """Load ``url`` again and again until ``check()`` holds on the page (WAIT_S at most)."""

    def loaded_and_true(d: webdriver.Chrome) -> bool:
        d.get(url)
        return check()

    wait(driver).until(loaded_and_true)
