"""Anytime-valid tests and confidence sequences for the mean of a finite suite sampled without replacement.

A suite of ``N`` tasks has fixed values ``x_1..x_N`` in [0, 1] (a task's mean reward, its pass@1, ...) and
mean ``mu``. Run in a uniformly random order, the task at step ``t`` is a draw without replacement, so given
the first ``t - 1`` values (sum ``S``), its expected value is the mean of the tasks left:
``C_t(m) = (N * m - S) / (N - t + 1)`` if ``mu = m``. Betting against that (Waudby-Smith & Ramdas, "Confidence
sequences for sampling without replacement", NeurIPS 2020, and "Estimating means of bounded random variables by
betting", JRSS-B 2024) gives, for a threshold ``m``, the capital

    K_t = prod_{i <= t} (1 + lam_i * (x_i - C_i(m)))        (the test of mu <= m; lam_i >= 0)

which, for any ``mu <= m``, is a nonnegative supermartingale (``E[x_i | past] = C_i(mu) <= C_i(m)``); by Ville's
inequality it ever reaches ``1 / alpha`` with probability at most ``alpha``, at whatever time one looks, so a run
may stop the moment it does and still claim ``mu > m`` at level ``alpha``. The mirrored capital
``prod (1 - lam_i * (x_i - C_i(m)))`` tests ``mu >= m``. The set of ``m`` neither test rejects is the confidence
sequence; at ``t = N`` it is the exact mean. On top of the bets, what is certain is used: ``mu`` lies between
``S / N`` (every task left worth 0) and ``(S + N - t) / N`` (worth 1).

The bet ``lam_i`` is predictable (made from the values before ``x_i``): the approximate-growth-rate bet
(aGRAPA) ``(mu_hat - C) / (sigma_hat^2 + (mu_hat - C)^2)`` on the running mean and variance (each with one
pseudo-observation, 1/2 and 1/4), only in the direction the test bets on, and at most ``c / C`` (``c / (1 - C)``
mirrored) with ``c = 3/4``, so a factor never falls below 1/4. Standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The largest share of its capital a bet risks (Waudby-Smith & Ramdas use 1/2 or 3/4).
MAX_BET = 0.75


@dataclass
class Capital:
    """One one-sided test of a finite population's mean against the threshold ``m``.

    ``upper``: tests ``mu <= m`` (rejecting shows ``mu > m``); otherwise tests ``mu >= m`` (shows ``mu < m``).
    """

    population: int
    m: float
    upper: bool
    log_capital: float = 0.0
    t: int = 0
    total: float = 0.0
    #: Running estimates for the bet: mean and sum of squared deviations, each with a pseudo-observation.
    _mean: float = 0.5
    _squares: float = 0.25
    history: list[float] = field(default_factory=list, repr=False)

    def _bet(self, null_mean: float) -> float:
        edge = (self._mean - null_mean) if self.upper else (null_mean - self._mean)
        if edge <= 0.0:
            return 0.0
        variance = self._squares / (self.t + 1)
        lam = edge / (variance + edge * edge)
        room = null_mean if self.upper else 1.0 - null_mean
        if room <= 0.0:
            return 0.0
        return min(lam, MAX_BET / room)

    def update(self, x: float) -> None:
        """Take the next value of the random order (in [0, 1])."""
        left = self.population - self.t
        if left <= 0:
            raise ValueError(f"all {self.population} values of the population were already taken")
        null_mean = (self.population * self.m - self.total) / left
        if 0.0 < null_mean < 1.0:
            lam = self._bet(null_mean)
            factor = 1.0 + lam * (x - null_mean) if self.upper else 1.0 - lam * (x - null_mean)
            self.log_capital += math.log(max(factor, 1e-300))
        self.t += 1
        self.total += x
        self._mean = (0.5 + self.total) / (self.t + 1)
        self._squares += (x - self._mean) ** 2

    def rejects(self, alpha: float) -> bool:
        """Whether the capital reached ``1 / alpha``: the null is rejected, for good."""
        return self.log_capital >= math.log(1.0 / alpha)


def certain_bounds(population: int, t: int, total: float) -> tuple[float, float]:
    """Where the mean must lie whatever the tasks not yet run are worth: (all 0, all 1)."""
    return total / population, (total + population - t) / population


def rejects(values: Sequence[float], population: int, m: float, upper: bool, alpha: float) -> bool:
    """Whether the test at ``m`` rejected at some point over ``values`` (certain bounds included)."""
    capital = Capital(population, m, upper)
    for x in values:
        capital.update(x)
        if capital.rejects(alpha):
            return True
        low, high = certain_bounds(population, capital.t, capital.total)
        if (upper and low > m) or (not upper and high < m):
            return True
    return False


def confidence_sequence(
    values: Sequence[float], population: int, alpha: float, tolerance: float = 1e-3, sides: int = 2
) -> tuple[float, float]:
    """The interval of means neither one-sided test (each at ``alpha / sides``) rejected over ``values``.

    Found by bisection on ``m`` for each end (each test's rejection is monotone in ``m`` for the values
    reward-like suites give; the ends are kept inside the certain bounds). For reports and plots: the
    gates are decided by ``Capital`` at their own threshold, never by this interval.
    """
    low_certain, high_certain = certain_bounds(population, len(values), math.fsum(values))
    if not values:
        return 0.0, 1.0

    def bisect(upper: bool) -> float:
        # upper test: rejects for small m (mu > m shown); the lower end is the largest m it rejects.
        inside, outside = (high_certain, low_certain) if upper else (low_certain, high_certain)
        if rejects(values, population, inside, upper, alpha / sides):
            return inside
        while abs(inside - outside) > tolerance:
            middle = (inside + outside) / 2
            if rejects(values, population, middle, upper, alpha / sides):
                outside = middle
            else:
                inside = middle
        return outside

    return max(low_certain, bisect(True)), min(high_certain, bisect(False))
