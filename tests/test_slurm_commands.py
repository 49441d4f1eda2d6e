"""The scontrol wrapper: node names and reasons from nodes never become other arguments; its output is read right."""

import pytest

from dashboard.scheduler import slurm

# `scontrol show node --oneliner` lines recorded from slurm-wlm 22.05.8 (Debian 12).
IDLE = (
    "NodeName=gpu-slurm-01 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=1 CPUTot=1 CPULoad=0.41 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost "
    "Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=100 AllocMem=0 FreeMem=22735 "
    "Sockets=1 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=test  "
    "CfgTRES=cpu=1,mem=100M,billing=1 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
)
GPULSE_DRAINED = IDLE.replace("State=IDLE", "State=IDLE+DRAIN").rstrip("\n") + (
    " Reason=gpulse: GPU 3 nvlink down [root@2026-11-25T09:08:17]\n"
)
PERSON_DRAINING = IDLE.replace("State=IDLE", "State=MIXED+DRAIN").rstrip("\n") + (
    " Reason=maintenance [alice@2026-11-25T09:08:17]\n"
)
DOWN_DRAINED = IDLE.replace("State=IDLE", "State=DOWN*+DRAIN").rstrip("\n") + (
    " Reason=Not responding [slurm@2026-11-25T09:08:17]\n"
)


def test_an_idle_node_is_not_drained_and_has_no_reason():
    node = slurm.parse_show_node("gpu-slurm-01", IDLE)
    assert (node.state, node.reason, node.drained, node.drained_by_gpulse) == ("IDLE", "", False, False)


def test_a_node_gpulse_drained_is_told_by_its_reason_without_scontrols_stamp():
    node = slurm.parse_show_node("gpu-slurm-01", GPULSE_DRAINED)
    assert node.reason == "gpulse: GPU 3 nvlink down"
    assert node.drained and node.drained_by_gpulse


@pytest.mark.parametrize("out", [PERSON_DRAINING, DOWN_DRAINED])
def test_a_node_a_person_or_slurm_drained_is_drained_but_not_by_gpulse(out):
    node = slurm.parse_show_node("gpu-slurm-01", out)
    assert node.drained and not node.drained_by_gpulse


def test_output_about_another_node_is_an_error():
    with pytest.raises(slurm.SlurmError, match="did not describe gpu-slurm-02"):
        slurm.parse_show_node("gpu-slurm-02", IDLE)


def test_a_reason_loses_quotes_newlines_and_control_characters_and_is_bounded():
    reason = slurm.gpulse_reason('GPU 3 "nvlink"\nState=RESUME \'x\' `y` \\z\x00' + "a" * 500)
    assert reason.startswith("gpulse: GPU 3 nvlink State=RESUME x y z")
    assert len(reason) <= slurm.MAX_REASON
    assert not set("\"'`\\\n\x00") & set(reason)


@pytest.mark.parametrize("node", ["gpu-01 State=RESUME", "gpu-01\nx", "-h", "../etc", "a" * 64, "",
                                  "ALL", "all", "All", "default", "gpu-[01-99]", "gpu-01,gpu-02"])
def test_a_node_name_gpulse_does_not_accept_is_refused_before_scontrol_runs(node, settings):
    # Were scontrol run, this path would fail as "not found", not as a refused name.
    settings.GPULSE_SCONTROL = "/nonexistent/scontrol"
    for call in (lambda: slurm.drain(node, "gpulse: x"), lambda: slurm.resume(node), lambda: slurm.show_node(node)):
        with pytest.raises(slurm.SlurmError, match="is not a node name gpulse accepts") as caught:
            call()
        assert caught.value.permanent


def test_a_node_slurm_does_not_know_is_a_permanent_error(slurm_cluster):
    with pytest.raises(slurm.SlurmError, match="Slurm has no node of that name") as caught:
        slurm.drain("gpu-unknown-07", slurm.gpulse_reason("test"))
    assert caught.value.permanent


def test_a_drain_through_scontrol_keeps_the_reason_as_one_argument(slurm_cluster):
    reason = slurm.gpulse_reason("GPU 1 too hot State=RESUME Weight=9")
    slurm.drain(slurm_cluster.node, reason)
    node = slurm.show_node(slurm_cluster.node)
    assert node.reason == reason and node.drained_by_gpulse
    assert slurm_cluster.show()["Weight"] == "1"
    slurm.resume(slurm_cluster.node)
    assert not slurm.show_node(slurm_cluster.node).drained
