"""Issue 15: request_memory edits and releases through htcondor2's surface (a recording fake of the schedd)."""

from __future__ import annotations

import htcondor2

from wire_daemon.execute.condor_control import HTCondorControl, LoggedCondorControl


class FakeSchedd:
    def __init__(self, request="2048", fail=False):
        self.request = request
        self.fail = fail
        self.edits = []
        self.actions = []

    def query(self, constraint=None, projection=None):
        return [{"RequestMemory": self.request}] if self.request is not None else [{}]

    def edit(self, job_spec, attr, value, flags=htcondor2.TransactionFlag.Default):
        if self.fail:
            raise htcondor2.HTCondorException("schedd is down")
        self.edits.append((tuple(job_spec), attr, value, flags))
        return len(job_spec)

    def act(self, action, job_spec, reason=None):
        self.actions.append((action, tuple(job_spec)))
        return {}


class NoCollector:
    def query(self, ad_type=None, constraint=None, projection=None):
        return []


def _control(jobs, schedd):
    return HTCondorControl(schedd, NoCollector(), jobs.get, "pool-a")


def test_request_memory_is_read_and_an_expression_is_left_alone():
    assert _control({"a": "3.0"}, FakeSchedd("2048")).request_memory_mib("a") == 2048.0
    expression = "ifThenElse(MemoryUsage =!= undefined, MemoryUsage * 3 / 2, 2048)"
    assert _control({"a": "3.0"}, FakeSchedd(expression)).request_memory_mib("a") is None
    assert _control({}, FakeSchedd()).request_memory_mib("a") is None  # no job in the queue


def test_a_new_request_is_a_durable_edit_reapplied_to_a_dagman_retry():
    jobs = {"a": "3.0"}
    schedd = FakeSchedd()
    control = _control(jobs, schedd)
    assert control.set_request_memory("a", 300)
    assert schedd.edits == [(("3.0",), "RequestMemory", "300", htcondor2.TransactionFlag.Default)]
    assert control.sync() == 0
    jobs["a"] = "9.0"  # DAGMan RETRY: a new cluster, back at the submit file's request
    assert control.sync() == 1
    assert schedd.edits[-1] == (("9.0",), "RequestMemory", "300", htcondor2.TransactionFlag.Default)
    assert control.set_request_memory("a", 600)  # a changed value reaches the same job again
    assert schedd.edits[-1][:3] == (("9.0",), "RequestMemory", "600")


def test_a_failed_edit_is_reported_and_a_release_acts_on_the_current_job():
    control = _control({"a": "3.0"}, FakeSchedd(fail=True))
    assert not control.set_request_memory("a", 300) and control.errors == 1
    schedd = FakeSchedd()
    control = _control({"a": "4.0"}, schedd)
    assert control.release_job("a")
    assert schedd.actions == [(htcondor2.JobAction.Release, ("4.0",))]
    assert not _control({}, schedd).release_job("b")


def test_condor_control_off_only_says_what_it_would_do():
    logged = LoggedCondorControl()
    assert logged.request_memory_mib("a") is None
    assert logged.set_request_memory("a", 300) and logged.release_job("a")
    assert logged.take_notes() == [
        "condor control off: would set request_memory of a to 300 MiB",
        "condor control off: would release a",
    ]
