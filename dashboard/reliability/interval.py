"""The 95 % confidence interval of an MTBF from a count of failures in a watched time.

For r failures in T node-hours (time-terminated: watching stops at a time, not
at a failure), the two-sided interval of the MTBF is
[2T / χ²(1−α/2; 2r+2), 2T / χ²(α/2; 2r)], with no upper bound for r = 0
(NIST/SEMATECH e-Handbook of Statistical Methods, 8.4.5.1).

The degrees of freedom are always even, and a χ² with 2k degrees of freedom is
tied to the Poisson distribution: P(χ²₂ₖ ≤ x) = 1 − Σᵢ₌₀ᵏ⁻¹ e^(−x/2)(x/2)ⁱ/i!.
Quantiles are found by bisection on that exact series (summed in log space, so
large x does not underflow) up to EXACT_MAX_K; beyond it, where the series
grows long, by the Wilson–Hilferty approximation, whose error there is far
below the interval's own width.
"""

import math

EXACT_MAX_K = 500
# Standard normal quantiles for the two tails of a 95 % interval.
Z_975 = 1.959963984540054


def _chi2_even_cdf(x: float, k: int) -> float:
    """P(χ² with 2k degrees of freedom ≤ x), by the Poisson series."""
    if x <= 0:
        return 0.0
    half = x / 2
    logs = [-half + i * math.log(half) - math.lgamma(i + 1) for i in range(k)]
    top = max(logs)
    return 1 - math.exp(top) * math.fsum(math.exp(value - top) for value in logs)


def _wilson_hilferty(p_z: float, df: int) -> float:
    third = 2 / (9 * df)
    return df * (1 - third + p_z * math.sqrt(third)) ** 3


def chi2_quantile(p: float, df: int) -> float:
    """The p-quantile of χ² with ``df`` (even, positive) degrees of freedom; p is 0.025 or 0.975."""
    if df <= 0 or df % 2:
        raise ValueError("degrees of freedom must be even and positive")
    k = df // 2
    if k > EXACT_MAX_K:
        return _wilson_hilferty(Z_975 if p > 0.5 else -Z_975, df)
    low, high = 0.0, df + 20 * math.sqrt(df) + 20
    for _ in range(200):
        middle = (low + high) / 2
        if _chi2_even_cdf(middle, k) < p:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2


def mtbf_interval(hours: float, failures: int) -> tuple[float, float | None]:
    """The 95 % interval of the MTBF (hours): (low, high); high None (unbounded) with no failure."""
    low = 2 * hours / chi2_quantile(0.975, 2 * failures + 2)
    high = 2 * hours / chi2_quantile(0.025, 2 * failures) if failures else None
    return low, high
