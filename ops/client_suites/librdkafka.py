"""librdkafka's own integration tests against a live 3-broker Backbone cluster.

    ops/conformance.d/librdkafka [--quick] [--tests 0001,0002] [--result docs/conformance/librdkafka.json]

The source is librdkafka's release tarball as vendored by the `rdkafka-sys` crate on crates.io, pinned in
ops/client_suites/librdkafka-source (Cargo.toml and Cargo.lock). It is built once per version under the cache
directory ($BACKBONE_CACHE_DIR, default ~/.cache/backbone) with Debian's -dev packages, and reused by every
later run. Each run starts its own cluster on free loopback ports for each test scenario the suite knows
(`default`: topics auto-created with 4 partitions; `noautocreate`), and for the tests that need security
(SECURED_JOBS) one with an authorizer (`authorizer`, PLAINTEXT) and one with SASL_SSL listeners as well
(`sasl_ssl`), as librdkafka's own CI runs them against Kafka; runs librdkafka's test-runner on each, and
writes the figures as JSON: passed, failed, skipped, and the tests left out (left_out.toml) with the reason.
`--update` merges a run of some tests into an earlier run's figures.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from backbone.dev import secure
from ops.client_suites import results
from ops.client_suites.cluster import SUITE_PROPERTIES, ClientLogin, running_cluster

log = logging.getLogger("conformance.librdkafka")

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent
SOURCE_MANIFEST = HERE / "librdkafka-source" / "Cargo.toml"
SOURCE_CRATE = "rdkafka-sys"
VERSION = "2.12.1"
LEFT_OUT_FILE = HERE / "librdkafka_left_out.toml"
# kafka-topics.sh, run by some tests from $KAFKA_PATH/bin, stands in for Kafka's with our CLI.
KAFKA_PATH = HERE / "kafka"
# The Kafka release whose API versions ours match most closely (Metadata 12, ListOffsets 7, Fetch 12);
# tests needing a newer broker skip themselves, and kafka-topics.sh gets --bootstrap-server (3.0 on).
BROKER_VERSION = "3.0.0"


@dataclass(frozen=True)
class Scenario:
    properties: Mapping[str, str]
    # librdkafka's name for the cluster (its tests' `.scenario`): a secured cluster is its `default` one.
    test_scenario: str = "default"
    sasl_ssl: bool = False
    # One test at a time: its tests change ACLs that the others' requests would be judged by.
    serial: bool = False


# As trivup configures Kafka for librdkafka's CI: ACLs on, a resource no ACL names open to everyone.
AUTHORIZER_PROPERTIES = {
    **SUITE_PROPERTIES,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
SCENARIOS = {
    "default": Scenario(SUITE_PROPERTIES),
    "noautocreate": Scenario({**SUITE_PROPERTIES, "auto.create.topics.enable": "false"}, "noautocreate"),
    "authorizer": Scenario(AUTHORIZER_PROPERTIES, serial=True),
    "sasl_ssl": Scenario(AUTHORIZER_PROPERTIES, sasl_ssl=True, serial=True),
    # Sessions that end after 10 s unless the client authenticates again (KIP-368), for 0142.
    "sasl_ssl_reauth": Scenario(
        {**AUTHORIZER_PROPERTIES, "connections.max.reauth.ms": "10000"}, sasl_ssl=True, serial=True
    ),
}
# The quick subset run by the test suite (about a minute of tests): producing (many clients, null
# messages, every codec, headers, idempotence), consuming (offsets, resets, offsets by time), groups
# (listing, committing, a balanced group).
QUICK_TESTS = ("0001", "0012", "0013", "0017", "0019", "0030", "0031", "0034", "0054", "0056", "0073", "0090")
TIMEOUT_MULTIPLIER = 2.0
# One line of the runner's summary table: | NAME | STATE | 1.234s | reason
SUMMARY_LINE = re.compile(r"^\|\s*(\d{4}\w*)\s*\|\s*([A-Z_]+)\s*\|\s*([\d.]+)s\s*\|\s?(.*)$")
# How the runner skips the tests that need no broker (-L); they are not counted.
LOCAL_ONLY = "Filtered due to negative test flags"
# librdkafka's SSL test (0097) loads the client certificate in every encoding from files trivup names in
# SSL_* variables; ops/dev-ca signs it as this name.
CLIENT_CERTIFICATE = "librdkafka-client"
SCENARIO_FIELD = re.compile(r'\.scenario\s*=\s*"([^"]*)"')
TEST_SOURCE = re.compile(r"^(\d{4})-.*\.(c|cpp)$")
ANSI = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")


# The test-runner processes running now, to end them when the run is interrupted.
_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()


def cache_root() -> Path:
    return Path(os.environ.get("BACKBONE_CACHE_DIR", Path.home() / ".cache" / "backbone")).expanduser()


# -- source and build -----------------------------------------------------------------------------------


def crate_source_dir() -> Path:
    """The pinned crate's unpacked source, downloaded by cargo from crates.io when not there yet."""
    if shutil.which("cargo") is None:
        raise SystemExit("cargo is missing: run ops/setup (it installs Debian's cargo)")
    output = subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--manifest-path", str(SOURCE_MANIFEST)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for package in json.loads(output)["packages"]:
        if package["name"] == SOURCE_CRATE:
            if not package["version"].endswith(f"+{VERSION}"):
                raise SystemExit(f"{SOURCE_CRATE} {package['version']} does not vendor librdkafka {VERSION}")
            return Path(package["manifest_path"]).parent / "librdkafka"
    raise SystemExit(f"{SOURCE_CRATE} is not in {SOURCE_MANIFEST}'s dependencies")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build at a time per cache directory (a pytest run and a manual run may start together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build() -> Path:
    """librdkafka's tests directory with test-runner built, from the cache when built before."""
    home = cache_root() / f"librdkafka-{VERSION}"
    tree = home / "librdkafka"
    stamp = home / "built"
    with _locked(home / "build.lock"):
        if stamp.exists():
            return tree / "tests"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(crate_source_dir(), tree)
        jobs = str(os.cpu_count() or 1)
        build_log = home / "build.log"
        started = time.monotonic()
        with open(build_log, "w") as out:
            for step in (
                ["./configure", "--no-download", "--disable-curl"],
                ["make", f"-j{jobs}", "libs"],
                ["make", f"-j{jobs}", "-C", "tests", "build"],
            ):
                print(f"librdkafka: {' '.join(step)}", flush=True)
                if subprocess.run(step, cwd=tree, stdout=out, stderr=subprocess.STDOUT).returncode:
                    raise SystemExit(f"librdkafka build step {step} failed; see {build_log}")
        stamp.write_text(f"{time.monotonic() - started:.0f} s\n")
        return tree / "tests"


# -- running --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    state: str  # PASSED, FAILED, SKIPPED
    seconds: float
    reason: str = ""


@dataclass
class Run:
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    seconds: float = 0.0

    def count(self, state: str) -> int:
        return sum(1 for outcome in self.outcomes.values() if outcome.state == state)


@dataclass(frozen=True)
class LeftOut:
    reason: str
    # Sub-tests (substrings of their names) that are run on their own, each in its own runner: the
    # test's other sub-tests need what `reason` names.
    run_subtests: tuple[str, ...] = ()
    # The Kafka version the test is told it runs against instead of BROKER_VERSION: the test then leaves
    # out, by its own checks, the variants that version's Kafka refuses as Backbone does (`reason`).
    broker_version: str | None = None


@dataclass(frozen=True)
class Job:
    number: str
    subtest: str | None = None
    broker_version: str | None = None
    # A secured scenario (SECURED_JOBS): named in the outcome, as a sub-test may also run unsecured.
    secured: str | None = None

    @property
    def label(self) -> str:
        label = self.number if self.subtest is None else f"{self.number}[{self.subtest}]"
        return label if self.secured is None else f"{label} on {self.secured}"


def _secured(scenario: str, *jobs: tuple[str, str | None]) -> tuple[Job, ...]:
    return tuple(Job(number, subtest, secured=scenario) for number, subtest in jobs)


# The tests (and sub-tests) that run on a secured cluster. 0109, 0115 and 0119 deny topics with kafka-acls.sh
# and skip themselves when the cluster needs authentication; 0097, 0135, 0142 and the sub-tests on a
# principal's authorized operations need SASL and SSL. Whole tests here run nowhere else.
SECURED_JOBS = {
    "authorizer": _secured(
        "authorizer",
        ("0109", None),
        ("0115", None),
        ("0119", None),
        ("0081", "do_test_CreateAcls:"),
        ("0081", "do_test_DescribeAcls:"),
        ("0081", "do_test_DeleteAcls:"),
        ("0081", "do_test_UserScramCredentials:"),
    ),
    "sasl_ssl": _secured(
        "sasl_ssl",
        ("0097", None),
        ("0135", None),
        ("0081", "do_test_DescribeTopics:"),
        ("0081", "do_test_DescribeCluster:"),
        ("0081", "do_test_DescribeConsumerGroups_with_authorized_ops:"),
    ),
    "sasl_ssl_reauth": _secured(
        "sasl_ssl_reauth",
        ("0142", "do_test_consumer:"),
        ("0142", "do_test_producer:"),
        ("0142", "do_test_reauth_failure:"),
    ),
}


def left_out() -> dict[str, LeftOut]:
    """Test number -> why it is not run (a feature Backbone leaves out), and the sub-tests run instead."""
    with open(LEFT_OUT_FILE, "rb") as f:
        entries = tomllib.load(f)
    return {
        n: LeftOut(e["reason"], tuple(e.get("run_subtests", ())), e.get("broker_version"))
        for n, e in entries.items()
    }


def parse_summary(output: str) -> dict[str, Outcome]:
    outcomes = {}
    for line in ANSI.sub("", output).splitlines():
        match = SUMMARY_LINE.match(line.strip())
        if match:
            name, state, seconds, reason = match.groups()
            outcomes[name] = Outcome(name, state, float(seconds), reason.strip())
    return outcomes


def test_numbers(tests_dir: Path) -> list[str]:
    """Every test number of the suite (its sources are NNNN-name.c or .cpp), without the manual 8xxx."""
    found = {m.group(1) for f in tests_dir.iterdir() if (m := TEST_SOURCE.match(f.name))}
    return sorted(number for number in found if number < "8000")


def scenario_numbers(tests_dir: Path, scenario: str) -> set[str]:
    """The test numbers whose entry in test.c's table names `scenario` (.scenario = "a,b")."""
    text = (tests_dir / "test.c").read_text(errors="replace")
    table = text[text.index("struct test tests[]") :]
    found = set()
    for entry in table.split("_TEST(")[1:]:
        named = SCENARIO_FIELD.search(entry)
        if named and scenario in named.group(1).split(","):
            found.add(entry[:4])
    return found


def failure_reason(output: str) -> str:
    """The runner's own words on why it stopped: the line after its `### Test ... failed` banner."""
    lines = ANSI.sub("", output).splitlines()
    for index, line in enumerate(lines):
        if line.startswith("### Test") and index + 1 < len(lines):
            return lines[index + 1].strip()
    return ""


def run_one(tests_dir: Path, job: Job, env: dict[str, str], output_file: Path) -> dict[str, Outcome]:
    """One test number (or one of its sub-tests) in its own runner process, so that a test timing out
    (the runner then exits) costs only that test."""
    number = job.number
    # -L: not the tests of librdkafka alone (its unit tests and mock clusters: no broker).
    command = [str(tests_dir / "test-runner"), "-L", "-p1"]
    job_env = {**env, "TESTS": number}
    if job.broker_version is not None:
        job_env["TEST_KAFKA_VERSION"] = job.broker_version
    if job.subtest is not None:
        job_env["SUBTESTS"] = job.subtest
    with open(output_file, "w") as out:
        process = subprocess.Popen(command, cwd=tests_dir, env=job_env, stdout=out, stderr=subprocess.STDOUT)
        with _RUNNING_LOCK:
            _RUNNING.add(process)
        try:
            code = process.wait()
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(process)
    output = output_file.read_text(errors="replace")
    outcomes = {}
    for name, outcome in parse_summary(output).items():
        if outcome.reason.startswith(LOCAL_ONLY) or not name.startswith(number):
            continue
        if outcome.state == "SKIPPED" and not outcome.reason:
            continue  # skipped silently: a test of another scenario
        if job.subtest is not None:
            name = f"{name}[{job.subtest}]"
            # A sub-test name that matches nothing would pass without testing anything.
            if outcome.state == "PASSED" and not _subtest_passed(output, job.subtest):
                outcome.state, outcome.reason = "FAILED", "no sub-test of this name ran"
        if job.secured is not None:
            name = f"{name} on {job.secured}"
        outcome.name = name
        if outcome.state in ("RUNNING", "FAILED") and not outcome.reason:
            outcome.reason = failure_reason(output) or f"test-runner exited with code {code}"
        outcomes[name] = outcome
    if code and not any(o.state in ("FAILED", "RUNNING") for o in outcomes.values()):
        reason = failure_reason(output) or f"test-runner exited with code {code}"
        outcomes[job.label] = Outcome(job.label, "FAILED", 0.0, f"{reason} (see {output_file})")
    return outcomes


def _subtest_passed(output: str, subtest: str) -> bool:
    return any(subtest in line and ": PASS (" in line for line in ANSI.sub("", output).splitlines())


def client_certificate(login: ClientLogin) -> tuple[dict[str, str], dict[str, str]]:
    """A client certificate signed by the cluster's CA, in every encoding librdkafka's SSL test loads, as
    trivup provides it: the test.conf settings (ssl.key.location...) and the SSL_* variables naming the
    files. The SASL_SSL listeners ask for no client certificate; 0097 then expects every connection with a
    trusted broker certificate to succeed, whatever the client's."""
    directory = login.ca_directory
    subprocess.run([str(secure.DEV_CA), str(directory), CLIENT_CERTIFICATE], check=True, capture_output=True)
    both = directory / f"{CLIENT_CERTIFICATE}.pem"  # certificate and key
    files = {
        "SSL_pub_pem": directory / "client.crt",
        "SSL_priv_pem": directory / "client.key",
        "SSL_pub_der": directory / "client.crt.der",
        "SSL_priv_der": directory / "client.key.der",
        "SSL_ca_der": directory / "ca.der",
        "SSL_pkcs": directory / "client.p12",
    }
    password = secrets.token_urlsafe(16)
    p12 = ["-out", files["SSL_pkcs"], "-passout", f"pass:{password}"]
    for command in (
        ["x509", "-in", both, "-out", files["SSL_pub_pem"]],
        ["pkey", "-in", both, "-out", files["SSL_priv_pem"]],
        ["x509", "-in", both, "-outform", "DER", "-out", files["SSL_pub_der"]],
        ["pkey", "-in", both, "-outform", "DER", "-out", files["SSL_priv_der"]],
        ["x509", "-in", login.ca_file, "-outform", "DER", "-out", files["SSL_ca_der"]],
        ["pkcs12", "-export", "-in", both, "-certfile", login.ca_file, *p12],
    ):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    settings = {
        "ssl.key.location": str(files["SSL_priv_pem"]),
        "ssl.certificate.location": str(files["SSL_pub_pem"]),
        "ssl.key.password": password,
    }
    env = {name: str(path) for name, path in files.items()}
    env |= {"SSL_all_cas_pem": str(login.ca_file), "SSL_password": password}
    return settings, env


def test_settings(login: ClientLogin | None) -> tuple[dict[str, str], dict[str, str]]:
    """What test.conf says about reaching the cluster securely, and the runner's SSL_* variables."""
    if login is None:
        return {}, {}
    certificate, env = client_certificate(login)
    settings = {
        "security.protocol": login.protocol,
        "sasl.mechanism": login.mechanism,
        "sasl.username": login.user,
        "sasl.password": login.password,
        "ssl.ca.location": str(login.ca_file),
        **certificate,
    }
    return settings, env


def run_scenario(
    tests_dir: Path, scenario: str, work: Path, jobs: list[Job], parallel: int
) -> dict[str, Outcome]:
    """One cluster configured for `scenario`, each test number over it; the outcome of every test run."""
    config = SCENARIOS[scenario]
    cluster_dir = work / f"cluster-{scenario}"
    with running_cluster(cluster_dir, config.properties, sasl_ssl=config.sasl_ssl) as cluster:
        security, ssl_env = test_settings(cluster.login)
        conf = secure.write_properties(
            work / f"test-{scenario}.conf",
            {
                "bootstrap.servers": cluster.bootstrap,
                "test.timeout.multiplier": str(TIMEOUT_MULTIPLIER),
                **security,
            },
        )
        env = {
            **os.environ,
            **ssl_env,
            "RDKAFKA_TEST_CONF": str(conf),
            "TEST_KAFKA_VERSION": BROKER_VERSION,
            "TEST_SCENARIO": config.test_scenario,
            "KAFKA_PATH": str(KAFKA_PATH),
            "BROKERS": cluster.bootstrap,
            "BACKBONE_PYTHON": sys.executable,
            "BACKBONE_ZOOKEEPER": cluster.zookeeper_connect,  # for the kafka-acls.sh stand-in
            "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}",
        }
        if config.serial:
            parallel = 1
        outputs = work / f"runner-{scenario}"
        outputs.mkdir(parents=True, exist_ok=True)
        print(f"librdkafka: scenario {scenario} on {cluster.bootstrap}, outputs in {outputs}", flush=True)
        outcomes: dict[str, Outcome] = {}
        with ThreadPoolExecutor(parallel) as pool:
            runs = [
                pool.submit(run_one, tests_dir, job, env, outputs / f"{_file_name(job.label)}.out")
                for job in jobs
            ]
            try:
                for finished in runs:
                    outcomes.update(finished.result())
            except BaseException:
                # Interrupted: start no more tests and end those running, so the cluster can stop.
                pool.shutdown(wait=False, cancel_futures=True)
                with _RUNNING_LOCK:
                    for process in _RUNNING:
                        process.terminate()
                raise
        dead = cluster.dead_brokers()
        if dead:
            log.error("event=brokers_died scenario=%s brokers=%s", scenario, dead)
        return outcomes


def _file_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)


def run_suite(
    tests: str | None, parallel: int, work: Path, scenarios: tuple[str, ...] = tuple(SCENARIOS)
) -> Run:
    tests_dir = build()
    skipped = left_out()
    numbers = [n for n in test_numbers(tests_dir) if tests is None or n in tests.split(",")]
    run = Run()
    started = time.monotonic()
    jobs = []
    secured_jobs = [job for secured in SECURED_JOBS.values() for job in secured]
    secured_only = {job.number for job in secured_jobs if job.subtest is None}
    secured_subtests = {job.number for job in secured_jobs if job.subtest is not None}
    for number in numbers:
        if number in secured_only:
            continue
        if number not in skipped:
            jobs.append(Job(number))
            continue
        entry = skipped[number]
        if entry.broker_version is not None:
            label = f"{number} (variants Kafka {entry.broker_version} refuses)"
            jobs.append(Job(number, broker_version=entry.broker_version))
        else:
            others = entry.run_subtests or number in secured_subtests
            label = f"{number} (other sub-tests)" if others else number
        run.outcomes[label] = Outcome(label, "SKIPPED", 0.0, entry.reason)
        jobs.extend(Job(number, subtest) for subtest in entry.run_subtests)
    for scenario in scenarios:
        if scenario in SECURED_JOBS:
            scenario_jobs = [job for job in SECURED_JOBS[scenario] if job.number in numbers]
        elif scenario != "default":
            own = scenario_numbers(tests_dir, SCENARIOS[scenario].test_scenario)
            scenario_jobs = [job for job in jobs if job.number in own]
        else:
            scenario_jobs = jobs
        if not scenario_jobs:
            continue
        outcomes = run_scenario(tests_dir, scenario, work, scenario_jobs, parallel)
        for name, outcome in outcomes.items():
            # A scenario's runner reports the tests of other scenarios as skipped: keep the real outcome.
            if name not in run.outcomes or run.outcomes[name].state == "SKIPPED":
                run.outcomes[name] = outcome
    run.seconds = time.monotonic() - started
    return run


def result(run: Run, command: str) -> dict:
    """The figures in the format docs/conformance/*.json share."""
    return {
        "client": "librdkafka",
        "version": VERSION,
        "suite": "librdkafka",
        "command": command,
        "broker_version_claimed": BROKER_VERSION,
        "seconds": round(run.seconds),
        "passed": run.count("PASSED"),
        "failed": run.count("FAILED") + run.count("RUNNING"),
        "skipped": run.count("SKIPPED"),
        "failures": [
            {"test": o.name, "reason": o.reason}
            for o in run.outcomes.values()
            if o.state in ("FAILED", "RUNNING")
        ],
        "left_out": [
            {"test": o.name, "reason": o.reason} for o in run.outcomes.values() if o.state == "SKIPPED"
        ],
        "passed_tests": [o.name for o in run.outcomes.values() if o.state == "PASSED"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ops/conformance.d/librdkafka", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only tests {', '.join(QUICK_TESTS)}")
    parser.add_argument("--tests", help="only these test numbers, comma-separated (e.g. 0001,0012)")
    parser.add_argument("--parallel", type=int, default=3, help="tests run at once (default 3)")
    parser.add_argument("--result", type=Path, help="write the figures here as JSON")
    parser.add_argument(
        "--update",
        action="store_true",
        help="merge this run (e.g. of --tests) into the figures already in --result, in place of what "
        "they said of these tests",
    )
    parser.add_argument(
        "--scenarios",
        help=f"only the clusters of these scenarios, comma-separated (of {', '.join(SCENARIOS)})",
    )
    parser.add_argument("--work-dir", type=Path, help="keep clusters and outputs here (default: a temp dir)")
    parser.add_argument("--build-only", action="store_true", help="build (or find in the cache) and stop")
    args = parser.parse_args(argv)
    if args.update and not (args.result and args.result.exists()):
        parser.error("--update needs --result naming an existing result file")
    if args.scenarios and (unknown := set(args.scenarios.split(",")) - set(SCENARIOS)):
        parser.error(f"unknown scenarios {', '.join(sorted(unknown))} (known: {', '.join(SCENARIOS)})")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # SIGTERM ends a run as Ctrl-C does: through the handlers that stop its test-runners and clusters.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.build_only:
        print(build())
        return 0
    tests = ",".join(QUICK_TESTS) if args.quick else args.tests
    # The quick subset holds no test of another scenario: one cluster is enough.
    scenarios = ("default",) if args.quick else tuple(SCENARIOS)
    if args.scenarios:
        scenarios = tuple(s for s in scenarios if s in args.scenarios.split(","))
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="librdkafka-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        run = run_suite(tests, args.parallel, work, scenarios)
    except BaseException:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
        raise
    failed = any(o.state == "FAILED" for o in run.outcomes.values())
    if args.work_dir is None and not failed:
        shutil.rmtree(work, ignore_errors=True)
    elif args.work_dir is None:
        # A failure's reason points at its output: the temporary clusters and outputs stay for reading.
        print(f"librdkafka: outputs and cluster logs kept in {work}")
    command = "ops/conformance.d/librdkafka" + (" --quick" if args.quick else "")
    if args.update:
        command += f" --tests {tests}" if tests else ""
        command += f" --scenarios {args.scenarios}" if args.scenarios else ""
    figures = result(run, command)
    for failure in figures["failures"]:
        print(f"FAILED {failure['test']}: {failure['reason']}")
    print(
        f"librdkafka {VERSION}: {figures['passed']} passed, {figures['failed']} failed, "
        f"{figures['skipped']} skipped in {figures['seconds']} s"
    )
    status = 1 if figures["failed"] or not figures["passed"] else 0  # of this run, merged or not
    if args.result:
        if args.update:
            numbers = {name[:4] for name in run.outcomes}
            figures = results.merge(json.loads(args.result.read_text()), figures, numbers)
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(json.dumps(figures, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
