"""How often to checkpoint a job, from how often its nodes fail.

A job on N nodes, each failing at random with mean time between failures M
(node MTBF), is interrupted with mean time M/N (the job's MTBF, failures of a
Poisson process adding up). With δ the time to write one checkpoint:

- Young's interval (J. W. Young, "A first order approximation to the optimum
  checkpoint interval", CACM 17(9), 1974): τ = √(2δM).
- Daly's interval (J. T. Daly, "A higher order estimate of the optimum
  checkpoint interval for restart dumps", FGCS 22(3), 2006, eq. 37):
  τ = √(2δM)·[1 + ⅓√(δ/2M) + ⅑(δ/2M)] − δ for δ < 2M, else τ = M.
- Daly's expected wall-clock time of a job of solve time T_s restarting in R
  (eq. 13): T_w = M·e^(R/M)·(e^((τ+δ)/M) − 1)·T_s/τ, so the fraction of wall
  time lost to checkpoints, rework and restarts is 1 − T_s/T_w.

M in both formulas is the job's MTBF: Daly's worked figures (δ = 5 min gives
116.7 min for M = 24 h, 56.7 min for 6 h, 9.1 min for 15 min) are the job's.
"""

import math
from dataclasses import asdict, dataclass

# Beyond e^700 a float overflows; the fraction lost is 1 to the last digit long before.
MAX_EXPONENT = 700.0


def young_interval(write_s: float, job_mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints, in seconds."""
    return math.sqrt(2 * write_s * job_mtbf_s)


def daly_interval(write_s: float, job_mtbf_s: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints, in seconds."""
    if write_s >= 2 * job_mtbf_s:
        return job_mtbf_s
    ratio = write_s / (2 * job_mtbf_s)
    return math.sqrt(2 * write_s * job_mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - write_s


def lost_fraction(interval_s: float, write_s: float, job_mtbf_s: float, restart_s: float = 0.0) -> float:
    """The expected fraction of wall time not spent on the job's work (Daly's eq. 13)."""
    exponent = (interval_s + write_s + restart_s) / job_mtbf_s
    if exponent > MAX_EXPONENT:  # failures come far faster than a checkpoint: the job never gets done
        return 1.0
    # expm1 keeps the precision of e^x − 1 where (τ+δ)/M is small (a reliable fleet).
    wall_per_work = job_mtbf_s * math.exp(restart_s / job_mtbf_s) * math.expm1((interval_s + write_s) / job_mtbf_s)
    return 1 - interval_s / wall_per_work


@dataclass(frozen=True)
class Plan:
    nodes: int
    hours: float
    checkpoint_write_s: float
    node_mtbf_h: float
    job_mtbf_h: float
    expected_interruptions: float
    p_interrupt: float
    young_interval_s: float
    daly_interval_s: float
    lost_fraction: float  # at Daly's interval, restarts taking no time

    def as_dict(self) -> dict:
        return asdict(self)


def plan(nodes: int, hours: float, write_s: float, node_mtbf_h: float) -> Plan:
    """The checkpoint plan of a job of ``hours`` on ``nodes`` nodes of node MTBF ``node_mtbf_h``."""
    job_mtbf_h = node_mtbf_h / nodes
    job_mtbf_s = job_mtbf_h * 3600
    expected = hours / job_mtbf_h
    daly = daly_interval(write_s, job_mtbf_s)
    return Plan(
        nodes=nodes, hours=hours, checkpoint_write_s=write_s, node_mtbf_h=node_mtbf_h, job_mtbf_h=job_mtbf_h,
        expected_interruptions=expected, p_interrupt=-math.expm1(-expected),
        young_interval_s=young_interval(write_s, job_mtbf_s), daly_interval_s=daly,
        lost_fraction=lost_fraction(daly, write_s, job_mtbf_s),
    )
