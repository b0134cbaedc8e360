"""The priority hook and worker retirement against a recording fake of htcondor2's surface."""

import htcondor2
import pytest

from wire_daemon.core.pricing import Market
from wire_daemon.execute.condor_control import HTCondorControl


class FakeSchedd:
    def __init__(self, fail=False, priority=0):
        self.edits = []
        self.fail = fail
        self.priority = priority  # every job's own JobPrio (Pegasus sets one per level)

    def query(self, constraint=None, projection=None):
        if self.fail:
            raise htcondor2.HTCondorException("schedd is down")
        return [{"JobPrio": self.priority}]

    def edit(self, job_spec, attr, value, flags=htcondor2.TransactionFlag.Default):
        if self.fail:
            raise htcondor2.HTCondorException("schedd is down")
        self.edits.append((tuple(job_spec), attr, value, flags))
        return len(job_spec)


class FakeCollector:
    def __init__(self, ads):
        self.ads = ads
        self.queries = []

    def query(self, ad_type=None, constraint=None, projection=None):
        self.queries.append((ad_type, constraint, tuple(projection or ())))
        by_instance = "WireInstanceId ==" in constraint
        return [
            ad
            for ad in self.ads
            if (not by_instance or f'"{ad["WireInstanceId"]}"' in constraint) and f'"{ad["WirePool"]}"' in constraint
        ]


class FakeStartd:
    drained = []

    def __init__(self, ad):
        self.ad = ad

    def drainJobs(
        self, drain_type=htcondor2.DrainType.Graceful, on_completion=None, check_expr=None, start_expr=None, reason=None
    ):
        FakeStartd.drained.append((self.ad["Machine"], drain_type, reason))
        return "req-1"


def _control(jobs, schedd=None, ads=()):
    FakeStartd.drained = []
    return HTCondorControl(
        schedd or FakeSchedd(), FakeCollector(list(ads)), jobs.get, "pool-a", startd_factory=FakeStartd
    )


def test_priority_is_a_non_durable_edit_of_the_current_job():
    jobs = {"mProject_ID01": "12.0"}
    control = _control(jobs)
    control.set_job_priority("mProject_ID01", 10)
    assert control.schedd.edits == [(("12.0",), "JobPrio", "10", htcondor2.TransactionFlag.NonDurable)]


def test_the_boost_raises_the_job_s_own_priority():
    """A Pegasus job of the third level has JobPrio 30: the boost must raise it, never set it to 10."""
    control = _control({"a": "7.0"}, schedd=FakeSchedd(priority=30))
    control.set_job_priority("a", 10)
    assert control.schedd.edits == [(("7.0",), "JobPrio", "40", htcondor2.TransactionFlag.NonDurable)]


def test_priority_is_reapplied_after_a_dagman_retry():
    jobs = {"a": "12.0"}
    control = _control(jobs)
    control.set_job_priority("a", 10)
    assert control.sync() == 0  # nothing changed
    jobs["a"] = "15.0"  # DAGMan retried the node: a new cluster
    assert control.sync() == 1
    assert [e[0] for e in control.schedd.edits] == [("12.0",), ("15.0",)]


def test_priority_waits_for_the_job_to_exist():
    jobs = {}
    control = _control(jobs)
    control.set_job_priority("a", 10)
    assert control.schedd.edits == []
    jobs["a"] = "3.0"
    assert control.sync() == 1


def test_schedd_errors_are_logged_not_raised(caplog):
    control = _control({"a": "1.0"}, schedd=FakeSchedd(fail=True))
    control.set_job_priority("a", 10)
    assert control.errors == 1
    assert "could not set JobPrio" in caplog.text


def _ad(instance, pool, machine, slot, state, address=None):
    address = address or f"<10.0.0.{len(machine)}:9618?alias={machine}>"
    return {
        "WireInstanceId": instance,
        "WirePool": pool,
        "Machine": machine,
        "MyAddress": address,
        "Name": f"{slot}@{machine}",
        "State": state,
    }


ADS = [
    _ad("i-0abc", "pool-a", "w1", "slot1", "Claimed", "<10.0.0.1:9618>"),
    _ad("i-0abc", "pool-a", "w1", "slot2", "Unclaimed", "<10.0.0.1:9618>"),
    _ad("i-0def", "pool-a", "w2", "slot1", "Unclaimed", "<10.0.0.2:9618>"),
    _ad("i-0abc", "pool-b", "x1", "slot1", "Claimed", "<10.0.0.3:9618>"),
    # Two workers behind one host name (the same Machine), each its own startd address.
    _ad("i-0aaa", "pool-a", "vm", "slot1", "Drained", "<127.0.0.2:4001>"),
    _ad("i-0bbb", "pool-a", "vm", "slot1", "Preempting", "<127.0.0.3:4002>"),
    _ad("i-0ccc", "pool-a", "vm", "slot1", "Matched", "<127.0.0.4:4003>"),
    _ad("i-0ddd", "pool-a", "vm", "slot1", "Owner", "<127.0.0.5:4004>"),
]


def test_retire_drains_gracefully_only_our_instance():
    control = _control({}, ads=ADS)
    control.retire_instance("i-0def")
    assert FakeStartd.drained == [("w2", htcondor2.DrainType.Graceful, "wire-daemon releases i-0def")]
    ad_type, constraint, _ = control.collector.queries[0]
    assert ad_type == htcondor2.AdType.Startd
    assert constraint == 'WireInstanceId == "i-0def" && WirePool == "pool-a"'


def test_worker_addresses_come_from_the_startd_ads_of_our_pool():
    control = _control({}, ads=ADS)
    addresses = control.worker_addresses()
    assert addresses["i-0def"] == "<10.0.0.2:9618>" and addresses["i-0aaa"] == "<127.0.0.2:4001>"
    assert "i-0abc" in addresses and len(addresses) == 6  # pool-b's worker is not ours
    assert control.collector.queries[-1][1] == 'WirePool == "pool-a" && WireInstanceId isnt undefined'


def test_retire_drains_each_startd_once():
    control = _control({}, ads=ADS)
    control.retire_instance("i-0abc")
    assert [machine for machine, _, _ in FakeStartd.drained] == ["w1"]


def test_retire_drains_a_startd_by_its_address():
    control = _control({}, ads=ADS)
    control.retire_instance("i-0bbb")
    assert FakeStartd.drained == [("vm", htcondor2.DrainType.Graceful, "wire-daemon releases i-0bbb")]
    assert control.errors == 0


def test_a_failed_drain_is_counted_and_logged_not_raised(caplog):
    class RefusingStartd(FakeStartd):
        def drainJobs(self, *args, **kwargs):
            raise htcondor2.HTCondorException("Startd failed to start draining jobs.")

    control = _control({}, ads=ADS)
    control.startd_factory = RefusingStartd
    control.retire_instance("i-0def")
    assert control.errors == 1 and "could not drain i-0def (<10.0.0.2:9618>)" in caplog.text


def test_claims_are_checked_right_before_termination():
    control = _control({}, ads=ADS)
    assert control.holds_claims("i-0abc") is True  # a slot runs a job
    assert control.holds_claims("i-0def") is False
    assert control.holds_claims("i-0zzz") is False  # gone from the collector


@pytest.mark.parametrize(
    ("instance", "held"),
    [("i-0aaa", False), ("i-0bbb", True), ("i-0ccc", True), ("i-0ddd", False)],
    ids=["drained", "preempting", "matched", "owner"],
)
def test_a_claim_is_a_running_or_vacating_job_or_a_match_about_to_start_one(instance, held):
    assert _control({}, ads=ADS).holds_claims(instance) is held


def test_unsafe_ids_never_reach_a_constraint():
    control = _control({}, ads=ADS)
    with pytest.raises(ValueError):
        control.holds_claims('x" || true || "')


class QueryingSchedd:
    def __init__(self, ads):
        self.ads = ads
        self.constraints: list[str] = []

    def query(self, constraint=None, projection=None):
        self.constraints.append(constraint)
        return self.ads


def test_a_node_job_is_found_by_workflow_uuid_and_node_name():
    from wire_daemon.execute.condor_control import queued_job_id

    schedd = QueryingSchedd([{"ClusterId": 41, "ProcId": 0}, {"ClusterId": 57, "ProcId": 0}])
    assert queued_job_id(schedd, "6d2b1c3e-0000-4000-8000-000000000001", "mProject_ID0000001") == "57.0"  # the retry
    assert schedd.constraints == [
        'pegasus_wf_uuid == "6d2b1c3e-0000-4000-8000-000000000001" && DAGNodeName == "mProject_ID0000001"'
    ]
    assert queued_job_id(QueryingSchedd([]), "u-1", "n") is None
    with pytest.raises(ValueError):
        queued_job_id(schedd, 'x" || true || "', "n")  # never a constraint injection


def test_a_market_preference_is_the_job_s_rank_reapplied_after_a_retry():
    jobs = {"a": "3.0"}
    control = _control(jobs)
    control.prefer_market("a", Market.ON_DEMAND)
    assert control.schedd.edits == [
        (("3.0",), "Rank", 'TARGET.WireMarket =?= "on-demand"', htcondor2.TransactionFlag.NonDurable)
    ]
    control.prefer_market("a", Market.ON_DEMAND)  # the same wish again: a new edit only for a new wish
    assert len(control.schedd.edits) == 2
    jobs["a"] = "4.0"  # DAGMan retried the node
    assert control.sync() == 1 and control.schedd.edits[-1][0] == ("4.0",)


class RequirementsSchedd(FakeSchedd):
    """A schedd whose jobs carry the Requirements condor_submit gave them, and keep what edits set."""

    def __init__(self):
        super().__init__()
        self.requirements = '(TARGET.Arch == "X86_64")'

    def query(self, constraint=None, projection=None):
        return [{"JobPrio": 0, "Requirements": self.requirements}]

    def edit(self, job_spec, attr, value, flags=htcondor2.TransactionFlag.Default):
        if attr == "Requirements":
            self.requirements = value
        return super().edit(job_spec, attr, value, flags)


def test_a_required_market_is_a_job_attribute_its_requirements_check_and_a_lift_clears_it():
    from wire_daemon.execute.condor_control import REQUIRE_CLAUSE

    jobs = {"a": "3.0"}
    schedd = RequirementsSchedd()
    control = _control(jobs, schedd=schedd)
    control.prefer_market("a", Market.ON_DEMAND, required=True)
    nd = htcondor2.TransactionFlag.NonDurable
    assert schedd.edits == [
        (("3.0",), "Rank", 'TARGET.WireMarket =?= "on-demand"', nd),
        (("3.0",), "WireRequiredMarket", '"on-demand"', nd),
        (("3.0",), "Requirements", f'((TARGET.Arch == "X86_64")) && {REQUIRE_CLAUSE}', nd),
    ]
    control.prefer_market("a", Market.ON_DEMAND, required=True)  # the clause is there: not added twice
    assert [e[1] for e in schedd.edits[3:]] == ["Rank", "WireRequiredMarket"]
    control.prefer_market("a", Market.ON_DEMAND)  # lifted: the attribute goes, the clause stays neutral
    assert schedd.edits[-1] == (("3.0",), "WireRequiredMarket", "undefined", nd)
    assert schedd.requirements.count("WireRequiredMarket") == 2  # one clause
    jobs["a"] = "4.0"  # DAGMan retried the node: the retry is not required anything, its attribute is cleared
    assert control.sync() == 1 and schedd.edits[-1] == (("4.0",), "WireRequiredMarket", "undefined", nd)


def test_a_market_preference_alone_never_touches_the_requirements():
    schedd = RequirementsSchedd()
    control = _control({"a": "3.0"}, schedd=schedd)
    control.prefer_market("a", Market.SPOT)
    assert [e[1] for e in schedd.edits] == ["Rank"]
