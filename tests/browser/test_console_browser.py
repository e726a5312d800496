"""The console in a real headless Chromium against a live `backbone dev up` topology: log in, see a killed
broker's partitions under-replicated, see a stopped consumer's lag grow and its status turn, change retention
through the form, browse a `<script>` value shown as text, and a viewer that cannot act."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from browser_support import INTERVAL_MS, log_in, shoot, wait_until

from backbone.client import Admin, Consumer, NewTopic, Producer
from backbone.client.audit import AuditCount, bucket_start

pytestmark = pytest.mark.browser

# A page refreshes itself every interval; what the cluster reports must be on it within two of them
# (plus the time a sample round and the page's own fetch take on a busy machine).
TWO_REFRESHES_S = 2 * INTERVAL_MS / 1000 + 2.0
# From a broker's kill to the overview saying so: two sampling intervals, and the page's own refresh
# (console.js refreshes every interval, and not more often than once a second).
BROKER_DOWN_SHOWN_S = 2 * INTERVAL_MS / 1000 + max(1.0, INTERVAL_MS / 1000)
# The sampler's requests wait up to five seconds for a broker before calling it silent.
SAMPLER_CATCHES_UP_S = 15.0


def dc1(backbone) -> str:
    return backbone.data["clusters"]["dc1"]["bootstrap"]


def test_every_page_renders_for_an_operator(backbone, browser) -> None:
    console = backbone.data["console"]
    with Producer(bootstrap_servers=dc1(backbone)) as producer:
        producer.send("pageviews", b'{"page": "/home", "user": "ann"}', key=b"ann").get(timeout=30)
    anonymous = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    anonymous.goto(console["url"] + "clusters/dc1")
    assert anonymous.locator("h1").inner_text() == "Log in"  # every page asks for a login first
    shoot(anonymous, "login")
    anonymous.context.close()
    page = log_in(browser, console)

    def cluster_page_lists_the_topic() -> bool:
        page.goto(console["url"] + "clusters/dc1")
        return "pageviews" in page.locator("main").inner_text()

    wait_until(cluster_page_lists_the_topic, 30, "the topic on the cluster page")
    shoot(page, "cluster")
    page.goto(console["url"])
    assert page.locator("h1").inner_text() == "Overview"
    shoot(page, "overview")
    for path, name, heading in [
        ("clusters/dc1/topics/pageviews", "topic", "Topic pageviews"),
        (
            "clusters/dc1/topics/pageviews/messages?partition=0&offset=0&format=json",
            "messages",
            "Messages of",
        ),
        ("clusters/dc1/groups", "groups", "Consumer groups"),
        ("mirrors", "mirrors", "Mirrors"),
        ("actions", "actions", "Action log"),
        ("clusters/dc1/reassignments", "reassignments", "reassignments on dc1"),
        ("clusters/dc1/topics/no-such-topic", "not-found", "404"),
    ]:
        page.goto(console["url"] + path)
        assert page.locator("h1").inner_text().startswith(heading)
        shoot(page, name)
    page.context.close()


def test_a_stopped_consumer_shows_growing_lag_and_a_verdict_in_words(backbone, browser) -> None:
    console = backbone.data["console"]
    bootstrap = dc1(backbone)
    with Admin(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic("orders", 1, 1)])
    with Producer(bootstrap_servers=bootstrap) as producer:
        for i in range(20):
            producer.send("orders", b"order %d" % i)
        producer.flush(timeout=30)
        with Consumer(
            bootstrap_servers=bootstrap, group_id="billing", auto_offset_reset="earliest"
        ) as consumer:
            consumer.subscribe(["orders"])
            seen = 0
            deadline = time.monotonic() + 30
            while seen < 20 and time.monotonic() < deadline:
                seen += sum(len(r) for r in consumer.poll(timeout_ms=500).values())
            consumer.commit()
        # The consumer is gone; records keep arriving, a few every half second, for at most a minute.
        page = log_in(browser, console)
        group_page = console["url"] + "clusters/dc1/groups/billing"
        wait_until(lambda: page.goto(group_page).ok, 15, "the group to be sampled")
        verdict = page.locator(".verdict")
        deadline = time.monotonic() + 60
        sent = 0
        while "OK" in verdict.inner_text() and time.monotonic() < deadline:
            for _ in range(5):
                producer.send("orders", b"late order")
            sent += 5
            time.sleep(0.5)
        assert "ERR" in verdict.inner_text() or "WARN" in verdict.inner_text(), verdict.inner_text()
        assert "orders partition 0: offset 20 has not moved for" in verdict.inner_text()
        assert "while lag grew from" in verdict.inner_text()

        # The 1h range charts one point per 10 s step (its highest lag), so the verdict, due after a few
        # 1 s samples, may come while every sample is still in one step: records keep arriving until the
        # history holds a later step, for at most half a minute.
        def total_lag_history() -> list[int]:
            answer = page.request.get(console["url"] + "api/clusters/dc1/groups/billing?range=1h").json()
            return [lag for _, lag in answer["history"]["total_lag"]]

        lags = total_lag_history()
        deadline = time.monotonic() + 30
        while not (len(lags) >= 2 and lags[-1] > min(lags)) and time.monotonic() < deadline:
            for _ in range(5):
                producer.send("orders", b"late order")
            sent += 5
            time.sleep(0.5)
            lags = total_lag_history()
    assert lags[-1] > min(lags) and lags[-1] <= sent, (lags, sent)
    assert page.locator("svg.chart polyline").count() >= 2
    shoot(page, "group-stopped")
    page.context.close()


def test_retention_changed_through_the_form_reads_back_with_topics_describe(backbone, browser) -> None:
    console = backbone.data["console"]
    with Admin(bootstrap_servers=dc1(backbone)) as admin:
        admin.create_topics([NewTopic("clicks", 1, 1)])
    page = log_in(browser, console)
    wait_until(lambda: page.goto(console["url"] + "clusters/dc1/topics/clicks").ok, 15, "the topic page")
    form = page.locator("#config-form")
    form.locator("input[name=name]").fill("retention.ms")
    form.locator("input[name=value]").fill("7200000")
    form.locator("button").click()
    assert "retention.ms: 604800000 -> 7200000" in page.locator("main").inner_text()
    shoot(page, "confirm-retention")
    page.locator("main button[type=submit]").click()
    assert "ok: done" in page.locator(".result").inner_text()
    described = subprocess.run(
        [
            sys.executable,
            "-m",
            "backbone",
            "topics",
            "describe",
            "clicks",
            "--bootstrap-server",
            dc1(backbone),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "retention.ms=7200000" in described.stdout, described.stdout
    page.goto(console["url"] + "actions")
    assert "retention.ms: 604800000 -> 7200000" in page.locator("main").inner_text()
    page.context.close()


def test_a_script_value_is_shown_as_text_and_never_run(backbone, browser) -> None:
    console = backbone.data["console"]
    attack = b'<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    with Producer(bootstrap_servers=dc1(backbone)) as producer:
        producer.send("untrusted", attack, key=b"<b>key</b>", headers=[("h", b"<i>x</i>")]).get(timeout=30)
    page = log_in(browser, console)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    wait_until(
        lambda: page.goto(console["url"] + "clusters/dc1/topics/untrusted/messages?partition=0&offset=0").ok,
        15,
        "the topic to be sampled",
    )
    value = page.locator("pre.value").first
    assert value.inner_text() == attack.decode()
    assert page.locator("main script").count() == 0 and page.locator("main img").count() == 0
    assert page.evaluate("window.pwned") is None and dialogs == []
    assert "<b>key</b>" in page.locator("table.messages").inner_text()
    shoot(page, "messages-script")
    page.context.close()


def test_a_viewer_sees_no_actions_and_is_refused_them(backbone, browser) -> None:
    console = backbone.data["console"]
    with Admin(bootstrap_servers=dc1(backbone)) as admin:
        admin.create_topics([NewTopic("viewed", 1, 1)])
    page = log_in(browser, console, "viewer_user", "viewer_password")
    wait_until(lambda: page.goto(console["url"] + "clusters/dc1/topics/viewed").ok, 15, "the topic page")
    assert page.locator("form[action$='/configs']").count() == 0
    assert page.locator("form[action$='/delete']").count() == 0
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    refused = page.request.post(
        console["url"] + "clusters/dc1/topics/viewed/delete", form={"csrf_token": token, "confirm": "viewed"}
    )
    assert refused.status == 403 and "is a viewer" in refused.text()
    with Admin(bootstrap_servers=dc1(backbone)) as admin:
        assert "viewed" in admin.list_topics()
    shoot(page, "topic-viewer")
    page.context.close()


def test_the_mirrors_page_shows_the_audit_grid_with_incomplete_buckets_in_colour(backbone, browser) -> None:
    console = backbone.data["console"]
    bucket = 600_000
    now = bucket_start(int(time.time() * 1000), bucket)
    counts = [("producer", now - bucket, 50), ("aggregate", now - bucket, 40), ("producer", now, 100),
              ("aggregate", now, 100)]  # fmt: skip
    with Producer(bootstrap_servers=backbone.data["clusters"]["aggregate"]["bootstrap"]) as producer:
        for sequence, (tier, start, count) in enumerate(counts):
            message = AuditCount(tier, "browser-test", sequence, "audited", start, bucket, count, now)
            producer.send("__audit", message.encode()).get(timeout=30)
    page = log_in(browser, console)

    row = page.locator("table.grid tr", has_text="audited")

    def grid_shown() -> bool:
        # The console reads the audit topic on its own schedule and may catch the first counts without the
        # rest; the last count sent (the current bucket's aggregate, a good cell) shows that all were read.
        page.goto(console["url"] + "mirrors")
        return row.count() > 0 and row.locator("td.good").count() > 0

    wait_until(grid_shown, 60, "the audit grid with all four counts")
    assert row.locator("td.bad").inner_text() == "40/50"
    assert row.locator("td.good").inner_text() == "100"
    assert "10 missing" in page.locator("main").inner_text()
    shoot(page, "mirrors-audit")
    page.context.close()


def test_a_killed_broker_shows_on_the_overview_within_two_refreshes(backbone, browser) -> None:
    """Last in the module: it leaves dc1 with one broker. Timed from the kill itself."""
    console = backbone.data["console"]
    with Admin(bootstrap_servers=dc1(backbone)) as admin:
        admin.create_topics([NewTopic("replicated", 6, 2)])
    page = log_in(browser, console)
    victim = backbone.data["clusters"]["dc1"]["brokers"][1]

    def console_sampled_the_topic_healthy() -> bool:
        found = page.request.get(console["url"] + "api/clusters/dc1").json()
        replicated = [t for t in found["topic_list"] if t["name"] == "replicated"]
        return found["brokers_up"] == 2 and bool(replicated) and replicated[0]["under_replicated"] == 0

    wait_until(console_sampled_the_topic_healthy, 30, "the console to sample the new topic, healthy")
    page.goto(console["url"])
    overview = page.locator("main")  # no reload from here on: the page's own script refreshes it
    assert f"broker {victim['id']} down" not in overview.inner_text()
    killed = time.monotonic()
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(
        lambda: (
            "partitions under-replicated" in overview.inner_text()
            and f"broker {victim['id']} down since" in overview.inner_text()
        ),
        BROKER_DOWN_SHOWN_S,
        lambda: f"the overview to say so; it says: {overview.inner_text()}",
        interval=0.05,
    )
    shown_after = time.monotonic() - killed
    print(f"the overview showed the killed broker {shown_after:.2f} s after the kill")
    assert shown_after <= BROKER_DOWN_SHOWN_S, f"shown {shown_after:.2f} s after the kill"
    shoot(page, "overview-broker-down")
    # Every partition has a replica on the dead broker; those it led have no live leader until the controller
    # elects others (on its own schedule, so their count may already be going down).
    found = page.request.get(console["url"] + "api/clusters/dc1/topics/replicated").json()
    assert found["under_replicated"] == 6, found
    # The cluster itself keeps the dead broker in every ISR until its ZooKeeper session expires; until then
    # the topic page marks its replicas as on a down broker, and afterwards as out of sync.
    page.goto(console["url"] + "clusters/dc1/topics/replicated")
    marked = page.locator("main span.bad", has_text=f"{victim['id']} (")
    wait_until(lambda: marked.count() == 6, TWO_REFRESHES_S, "all six partitions marking the dead replica")
    with Admin(bootstrap_servers=dc1(backbone), default_api_timeout_ms=5000) as admin:

        def cluster_reports_it() -> bool:
            described = admin.describe_topics(["replicated"])["replicated"]
            return all(victim["id"] not in p.isr for p in described.partitions)

        wait_until(cluster_reports_it, 60, "the cluster to drop the killed broker from every ISR")
    out_of_sync = page.locator("main span.bad", has_text="(out of sync)")
    wait_until(
        lambda: out_of_sync.count() == 6, SAMPLER_CATCHES_UP_S, "all six partitions marked out of sync"
    )
    shoot(page, "topic-under-replicated")
    page.context.close()
