"""OpenTelemetry spans and metrics of a runner, read back with the SDK's in-memory
exporter and reader over a real LocalCore serve (issue 15)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from openagentcore.local import FunctionCall, LocalCore
from openagentcore.runner import _observe
from openagentcore.store import CallKey, CallState, MemoryResultStore, PostgresResultStore

from ._support import PAIRED, Flavour, Harness, flavoured, one_turn
from .test_store_outage import OutageStore

MakeCore = Callable[..., LocalCore]
MakeHarness = Callable[..., Harness]

RUNNER_COMBINATIONS = PAIRED


class Telemetry:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    made = Telemetry()
    yield made
    made.tracer_provider.shutdown()
    made.meter_provider.shutdown()


def _lookup(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


def _broken(city: str) -> str:
    """Always fails."""
    raise RuntimeError("boom")


def test_each_call_is_an_execute_tool_span_with_save_and_post_children(
    make_core: MakeCore, make_harness: MakeHarness, flavour: Flavour, telemetry: Telemetry
) -> None:
    core = make_core(
        scenario=one_turn(
            [FunctionCall("_lookup", {"city": "Oslo"}), FunctionCall("_broken", {"city": "x"})]
        )
    )
    harness = make_harness(
        core,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    harness.runner.function(name="_lookup")(flavoured(_lookup, flavour))
    harness.runner.function(name="_broken")(flavoured(_broken, flavour))
    session_id = harness.create_session()
    assert harness.serve(session_id).final_status == "idle"
    harness.close()  # every call settled and its span ended

    spans = telemetry.spans()
    calls = {
        s.attributes["gen_ai.tool.name"]: s for s in spans if s.name.startswith("execute_tool")
    }
    assert set(calls) == {"_lookup", "_broken"}
    for name, span in calls.items():
        assert span.name == f"execute_tool {name}"
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.operation.name"] == "execute_tool"
        assert attributes["gen_ai.tool.type"] == "function"
        assert attributes["openagentcore.session_id"] == session_id
        assert str(attributes["openagentcore.turn_id"]).startswith("turn")
        assert attributes["openagentcore.call.attempt"] == 1
        assert attributes["openagentcore.call.outcome"] in ("submitted", "applied")
        assert attributes["gen_ai.tool.call.id"] in core.stored_results(session_id)
        children = [
            s for s in spans if s.parent is not None and s.parent.span_id == span.context.span_id
        ]
        assert sorted(c.name for c in children) == [
            "openagentcore.post_result",
            "openagentcore.save_result",
        ]
        assert all(c.context.trace_id == span.context.trace_id for c in children)
        assert all(c.end_time is not None and c.end_time <= span.end_time for c in children)
    assert calls["_broken"].attributes["error.type"] == "function_failed"
    assert "error.type" not in calls["_lookup"].attributes

    outcomes = {
        (p.attributes["gen_ai.tool.name"], p.attributes["openagentcore.call.outcome"]): p.value
        for p in telemetry.points("openagentcore.calls")
    }
    assert sum(outcomes.values()) == 2
    assert {name for name, _ in outcomes} == {"_lookup", "_broken"}
    durations = telemetry.points("openagentcore.call.duration")
    assert sum(p.count for p in durations) == 2


def test_a_call_in_doubt_is_counted_and_marked_on_its_span(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    telemetry: Telemetry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A started record without a result whose owner is gone: an idempotent function
    runs again, and the call is counted in doubt once."""
    core = make_core(scenario=one_turn([FunctionCall("_lookup", {"city": "Oslo"})]))
    store = MemoryResultStore()
    harness = make_harness(
        core,
        store=store,
        lease_seconds=0.2,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    harness.runner.function(name="_lookup", idempotent=True)(flavoured(_lookup, flavour))
    session_id = harness.create_session()
    (pending,) = harness.wait_for_pending(session_id)
    key = CallKey(session_id, pending.turn_id, pending.call_id)
    # A runner that died after claiming: its lease has run out by the time we serve.
    store.claim(
        key, function_name="_lookup", arguments_hash="x", owner="dead-owner", lease_seconds=0.01
    )
    caplog.set_level(logging.WARNING, logger="openagentcore.runner")
    assert harness.serve(session_id).in_doubt == [key]
    (warning,) = [r.getMessage() for r in caplog.records if "in doubt" in r.getMessage()]
    assert all(part in warning for part in (key.call_id, key.session_id, "_lookup", "rerun"))
    record = store.get(key)
    assert record is not None
    assert record.state in (CallState.SUBMITTED, CallState.APPLIED)
    harness.close()

    (span,) = [s for s in telemetry.spans() if s.name == "execute_tool _lookup"]
    assert span.attributes["openagentcore.call.in_doubt"] is True
    assert span.attributes["openagentcore.call.attempt"] == 2
    (point,) = telemetry.points("openagentcore.calls.in_doubt")
    assert point.value == 1
    assert point.attributes["gen_ai.tool.name"] == "_lookup"


@pytest.fixture(scope="module")
def global_spans() -> InMemorySpanExporter:
    """OpenTelemetry configured the way an application does it, once per process."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    if trace.get_tracer_provider() is not provider:
        pytest.fail("something else set OpenTelemetry's global tracer provider first")
    return exporter


def test_the_global_providers_are_used_without_any_option(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    global_spans: InMemorySpanExporter,
) -> None:
    """Configuring OpenTelemetry in the application is enough: no runner option."""
    core = make_core(scenario=one_turn([FunctionCall("_lookup", {"city": "Rome"})]))
    harness = make_harness(core)
    harness.runner.function(name="_lookup")(flavoured(_lookup, flavour))
    session_id = harness.create_session()
    harness.serve(session_id)
    harness.close()

    mine = [
        s
        for s in global_spans.get_finished_spans()
        if (s.attributes or {}).get("openagentcore.session_id") == session_id
    ]
    assert [s.name for s in mine if s.name.startswith("execute_tool")] == ["execute_tool _lookup"]


def test_a_store_unreachable_for_seconds_is_a_warning_naming_it_and_counted(
    make_core: MakeCore,
    make_harness: MakeHarness,
    flavour: Flavour,
    telemetry: Telemetry,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_observe, "STORE_WARN_AFTER", 0.3)

    class NamedOutageStore(OutageStore):
        location = "postgresql://bot@db.internal/bots table public.calls"

    store = NamedOutageStore()
    store.fail("claim")
    store.recover_after(1.5)
    core = make_core(scenario=one_turn([FunctionCall("_lookup", {"city": "Oslo"})]))
    harness = make_harness(
        core,
        store=store,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
    )
    harness.runner.function(name="_lookup")(flavoured(_lookup, flavour))
    caplog.set_level(logging.WARNING, logger="openagentcore.runner")
    session_id = harness.create_session()
    assert harness.serve(session_id).final_status == "idle"

    (warning,) = [r.getMessage() for r in caplog.records if "unreachable for" in r.getMessage()]
    assert warning.startswith("Result store postgresql://bot@db.internal/bots table public.calls")
    errors = telemetry.points("openagentcore.store.errors")
    assert sum(p.value for p in errors) == store.failures["claim"] >= 2


@pytest.mark.postgres
def test_a_postgres_store_names_its_dsn_without_the_password() -> None:
    dsn = os.environ.get("OPENAGENTCORE_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip("needs OPENAGENTCORE_TEST_POSTGRES_DSN")
    parsed = httpx.URL(dsn)
    url = parsed.copy_with(username=parsed.username, password="not-the-password")
    store = PostgresResultStore(str(url))
    try:
        assert "not-the-password" not in store.location
        assert store.location.startswith(f"postgresql://{parsed.username}@{parsed.host}")
        assert "openagentcore_calls" in store.location
    finally:
        store.close()
