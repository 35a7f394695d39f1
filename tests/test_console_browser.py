"""`logbus console` in a real browser (headless Debian chromium driven by selenium) against a real broker:
the pages render, the lag chart of the live page rises while a consumer is paused and falls when it
resumes (read back from the plotted values the page's script keeps swapping in), a share group's
page refreshes its lag, and a topic is created through the form. Screenshots go to
$LOGBUS_TEST_ARTIFACTS (default test-artifacts/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from helpers import QUIET, REPO_ROOT, ConsoleProcess, produce_all, running_console, wait_until

from logbus.testing import BrokerProcess, running_broker

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="needs Debian's chromium and chromium-driver (./dev test installs them)")
TOPIC = "clicks"
GROUP = "slow-readers"
ARTIFACTS = Path(os.environ.get("LOGBUS_TEST_ARTIFACTS", os.path.join(REPO_ROOT, "test-artifacts")))


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    with running_broker() as started:
        admin = AdminClient({"bootstrap.servers": started.bootstrap, **QUIET})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
        produce_all(started.bootstrap, TOPIC, [(None, b"first")] * 5)
        yield started


@pytest.fixture(scope="module")
def console(broker: BrokerProcess) -> Iterator[ConsoleProcess]:
    with running_console(broker.bootstrap, "--sample-interval", "0.3", "--refresh", "0.5") as started:
        yield started


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: object, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(ARTIFACTS / f"console-{name}.png"))


def test_every_page_renders(browser: object, console: ConsoleProcess) -> None:
    for path, heading, name in (("/", "Cluster", "cluster"), ("/brokers", "Brokers", "brokers"),
                                ("/topics", "Topics", "topics"), (f"/topics/{TOPIC}", f"Topic {TOPIC}", "topic"),
                                ("/groups", "Groups", "groups"),
                                (f"/topics/{TOPIC}/messages?partition=0", f"Messages of {TOPIC}", "messages")):
        browser.get(console.url + path)
        assert browser.find_element(By.TAG_NAME, "h1").text == heading
        screenshot(browser, name)
    assert [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "#records td")][3] == "first"  # the last page


def plotted_lag(driver: object) -> list[float]:
    """The lag values the live chart plots. Read in one script call: the page's refresh swaps the
    chart in anew every few seconds, so an element found first and read after may be gone."""
    values = driver.execute_script(
        "const line = document.querySelector('#lag polyline'); return line ? line.getAttribute('data-values') : '';")
    return [float(value) for value in (values or "").split()]


def test_lag_plot_rises_while_the_consumer_is_paused_and_falls_when_it_resumes(
        browser: object, console: ConsoleProcess, broker: BrokerProcess) -> None:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **QUIET})
    try:
        consumer.subscribe([TOPIC])
        caught_up = consume_and_commit(consumer, 5)
        consumer.pause(consumer.assignment())
        browser.get(f"{console.url}/groups/{GROUP}")
        for backlog in (10, 20):
            produce_all(broker.bootstrap, TOPIC, [(None, b"more")] * 10)
            wait_until(lambda b=backlog: keep_member(consumer) and plotted_lag(browser)[-1:] == [b], timeout=20,
                       message=f"the plotted lag to reach {backlog}")
        rising = plotted_lag(browser)
        assert 10.0 in rising and rising.index(10.0) < rising.index(20.0)
        screenshot(browser, "lag-paused")
        consumer.resume(consumer.assignment())
        consume_and_commit(consumer, 20, caught_up)
        wait_until(lambda: keep_member(consumer) and plotted_lag(browser)[-1:] == [0.0], timeout=20,
                   message="the plotted lag to fall back to 0")
        assert max(plotted_lag(browser)) == 20.0  # the same live chart shows the rise and the fall
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-refreshed-at")
        screenshot(browser, "lag-resumed")
    finally:
        consumer.close()


def keep_member(consumer: Consumer) -> bool:
    """Poll (paused: nothing comes) so the consumer stays in its group while the test waits."""
    consumer.poll(0.05)
    return True


def consume_and_commit(consumer: Consumer, count: int, already: int = 0) -> int:
    """Read `count` more records and commit past them; returns the records read in all."""
    read = [0]

    def more() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            read[0] += 1
        return read[0] >= count

    wait_until(more, timeout=30, interval=0, message=f"{count} records")
    consumer.commit(asynchronous=False)
    return already + count


def test_create_a_topic_through_the_form(browser: object, console: ConsoleProcess) -> None:
    browser.get(console.url + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("from-the-browser")
    form.find_element(By.NAME, "partitions").send_keys("2")
    form.find_element(By.NAME, "confirm").click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_until(lambda: browser.find_elements(By.ID, "message"), timeout=20, message="the result page")
    assert browser.find_element(By.ID, "message").text == "Created topic from-the-browser."
    screenshot(browser, "created")
    browser.find_element(By.ID, "next").click()
    wait_until(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2, timeout=20,
               message="the new topic's page")


def test_a_share_group_page_shows_its_lag_live(browser: object, console: ConsoleProcess, broker: BrokerProcess) -> None:
    """A share group's page (KIP-932): its start offset, and its lag refreshed in place as records arrive."""
    topic, group = "jobs", "job-workers"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **QUIET})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    earliest = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([earliest])[earliest].result(15)
    produce_all(broker.bootstrap, topic, [(None, b"job")] * 3)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **QUIET})
    try:
        consumer.subscribe([topic])
        received: list[object] = []
        wait_until(lambda: received.extend(consumer.poll(0.5)) or len(received) >= 3, timeout=30,
                   message="the share consumer got every record")
        consumer.commit_sync()
    finally:
        consumer.close()

    def row() -> list[str]:
        """The offsets table's cells, read in one script call (the refresh swaps the table in anew)."""
        return browser.execute_script(
            "return [...document.querySelectorAll('#share-offsets td')].map(cell => cell.textContent.trim());")
    browser.get(f"{console.url}/share-groups/{group}")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Share group {group}"
    wait_until(lambda: row() == [topic, "0", "3", "0"], timeout=20, message="every job delivered: lag 0")
    produce_all(broker.bootstrap, topic, [(None, b"later")] * 4)
    wait_until(lambda: row() == [topic, "0", "3", "4"], timeout=20, message="the page's lag refreshed to 4")
    screenshot(browser, "share-group")
