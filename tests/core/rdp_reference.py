#!/usr/bin/env python3
"""Reference values for the RDP accountant (core/privacy/src/rdp.cpp), computed independently at 50 digits.

The accountant bounds the privacy loss of the Poisson-sampled Gaussian mechanism (each record joins a
step with probability q; the step adds Gaussian noise of standard deviation sigma times the L2
sensitivity) in Renyi differential privacy, composes steps by adding, and converts to (epsilon, delta).
This script computes the same quantities another way: with mpmath at 50 significant digits, directly
from the formulas, without the log-space rearrangements the C++ code needs to stay within doubles.

  One step at order alpha (Mironov, Talwar, Zhang, "Renyi Differential Privacy of the Sampled Gaussian
  Mechanism", 2019): rdp = log(A_alpha) / (alpha - 1), where
    integer alpha:    A = sum_{k=0}^{alpha} C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k) / (2 sigma^2))
    fractional alpha: A = A0 + A1 (their Section 3.3), z0 = sigma^2 log(1/q - 1) + 1/2,
      A0 = sum_{k>=0} C(alpha,k) (1-q)^(alpha-k) q^k exp((k^2-k)/(2 sigma^2)) erfc((k-z0)/(sqrt(2) sigma))/2
      A1 = sum_{k>=0} C(alpha,k) (1-q)^k q^(alpha-k) exp((j^2-j)/(2 sigma^2)) erfc((z0-j)/(sqrt(2) sigma))/2,
           j = alpha - k;
      the series alternate once k > alpha and decay only polynomially, so their tails are summed with
      mpmath's alternating-series acceleration, and every fractional A is checked against a direct
      quadrature of its definition, A = E_{z ~ N(0, sigma^2)} [(1 - q + q exp((2z - 1)/(2 sigma^2)))^alpha].
    q = 0: 0; q = 1 (the plain Gaussian mechanism): alpha / (2 sigma^2).
  Conversion (Balle, Barthe, Gaboardi, Hsu, Sato 2020; Canonne, Kamath, Steinke 2020):
    epsilon = min over orders of rdp + log((alpha-1)/alpha) - (log(delta) + log(alpha)) / (alpha-1),
    the order is the one attaining the minimum, and epsilon is never reported below 0 (and is 0 where
    the RDP is exactly 0: equal distributions).

  The Skellam mechanism (Agarwal, Kairouz, Liu, NeurIPS 2021, Corollary 3.6): the release of an integer
  sum with L1 and L2 sensitivities l1, l2 and symmetric Skellam noise of variance v per coordinate has,
  at integer alpha, rdp = alpha l2^2 / (2 v) + min(((2 alpha - 1) l2^2 + 6 l1) / (4 v^2), 3 l1 / (2 v));
  a fractional order takes the next integer's value (the Renyi divergence grows with the order). Poisson
  sampled with probability q (Zhu and Wang, ICML 2019, general upper bound), with eps(l) the unsampled
  RDP:
    A = (1-q)^(alpha-1) (alpha q - q + 1) + C(alpha,2) q^2 (1-q)^(alpha-2) exp(eps(2))
        + 3 sum_{l=3}^{alpha} C(alpha,l) (1-q)^(alpha-l) q^l exp((l-1) eps(l)),
    rdp = min(log(A) / (alpha - 1), eps(alpha)),
  A summed here exactly as written, term by term at 50 digits.

  The discrete Gaussian mechanism (Canonne, Kamath, Steinke, NeurIPS 2020, arXiv:2004.00010 Theorem 14:
  the multivariate discrete Gaussian of scale sigma times the L2 sensitivity is 1/(2 sigma^2)-zCDP):
  unsampled, eps(alpha) = alpha / (2 sigma^2) at every order; Poisson sampled, the same Zhu and Wang
  bound from that eps(l).

Usage:
  python3 rdp_reference.py --write rdp_reference.json   # compute the table and write it
  python3 rdp_reference.py --check rdp_reference.json   # recompute it; exit 1 if the file differs
                                                        # anywhere by more than 1e-12 relative
"""

import argparse
import json
import sys

try:
    import mpmath
    from mpmath import mp, mpf
except ImportError:
    sys.exit("rdp_reference.py needs mpmath (Debian: python3-mpmath, which toolchains/install-deps --tests installs)")

mp.dps = 50

# The orders the accountant tracks: keep identical to k_orders in core/privacy/src/rdp.cpp (tests/core/rdp_test.cpp
# compares them with this table's "orders"). Fractional orders below 5 serve large budgets, where the
# best order is small; 5..64 the usual range; 80..256 the smallest budgets.
ORDERS = [1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5] + [float(a) for a in range(5, 65)] + \
         [80.0, 96.0, 128.0, 256.0]

# The cases: name, mechanisms composed (q, sigma, steps), delta and the orders (None: ORDERS).
CASES = [
    # The worked example of Opacus's opacus/accountants/analysis/rdp.py module docstring: two
    # mechanisms composed, orders 2..32; its docstring gives epsilon 0.336 at order 23.
    ("opacus_docstring", [(1e-5, 1.0, 10), (1e-4, 3.0, 4)], 1e-5, [float(a) for a in range(2, 33)]),
    # Typical federated settings (q: the fraction of the clients a round samples).
    ("fl_q0.01_sigma1.0_T1000", [(0.01, 1.0, 1000)], 1e-5, None),
    ("fl_q0.05_sigma0.8_T500", [(0.05, 0.8, 500)], 1e-5, None),
    ("fl_q0.1_sigma2.0_T5000", [(0.1, 2.0, 5000)], 1e-5, None),
    ("fl_q0.02_sigma0.5_T100", [(0.02, 0.5, 100)], 1e-5, None),
    ("fl_q0.03_sigma1.2_T2000", [(0.03, 1.2, 2000)], 1e-6, None),
    # A large population: q small enough that A - 1 is about 1e-9 at the fractional orders.
    ("cross_device_q1e-4_sigma1.0_T10000", [(1e-4, 1.0, 10000)], 1e-5, None),
    # q = 1: the plain Gaussian mechanism, rdp = alpha / (2 sigma^2) per step.
    ("gaussian_q1_sigma1.0_T10", [(1.0, 1.0, 10)], 1e-5, None),
    # Little noise: large terms, a large epsilon whose best order is fractional.
    ("small_sigma_q0.01_sigma0.3_T100", [(0.01, 0.3, 100)], 1e-5, None),
    # q above 1/2: z0 < 0, the series' tails carry most of A.
    ("large_q0.6_sigma1.5_T20", [(0.6, 1.5, 20)], 1e-5, None),
    # Fractional orders only: the two-series formula alone decides epsilon.
    ("fractional_only_q0.1_sigma0.7_T300", [(0.1, 0.7, 300)], 1e-5, [1.25, 1.5, 1.75, 2.25, 2.5, 3.5, 4.5]),
    # Two phases at different rates, as a hub that changes its cohort size mid-run.
    ("two_phases", [(0.05, 1.0, 200), (0.01, 1.5, 800)], 1e-5, None),
]

# The Skellam cases: name, releases composed (q, l1, l2, variance, steps), delta. The sensitivities are
# in ring steps as the engine derives them: l2 = S + sqrt(d) for a clip of S steps and d values, l1 =
# min(sqrt(d) l2, l2^2), variance (sigma S)^2.
def _engine_like(d, scale, sigma):
    l2 = scale + mpmath.sqrt(d)
    return float(min(mpmath.sqrt(d) * l2, l2 * l2)), float(l2), float((sigma * scale) ** 2)


SKELLAM_CASES = [
    # bench/dp's shape: 784-512-512-10 (669 706 values), a clip of 2^10 sqrt(d) steps, q = 0.05.
    ("skellam_fedavg_q0.05_sigma1.0_T300", [(0.05, *_engine_like(669706, 1024 * 818, 1.0), 300)], 1e-5),
    ("skellam_ist_q0.01_sigma0.8_T1000", [(0.01, *_engine_like(101770, 2 ** 18, 0.8), 1000)], 1e-5),
    # A coarse ring: the rounding's sqrt(d) is a fifth of the clip, and the L1 terms count.
    ("skellam_coarse_q0.1_T200", [(0.1, *_engine_like(10000, 500, 1.2), 200)], 1e-5),
    # Little noise in few steps: the 3 l1 / (2 v) branch of the minimum.
    ("skellam_small_variance_q0.2_T20", [(0.2, 40.0, 10.0, 30.0, 20)], 1e-5),
    # q = 1: the unsampled mechanism.
    ("skellam_q1_T10", [(1.0, *_engine_like(1000, 4096, 2.0), 10)], 1e-5),
    # A large population's tiny rate.
    ("skellam_q1e-4_T10000", [(1e-4, *_engine_like(50000, 2 ** 16, 1.0), 10000)], 1e-6),
    # Two phases (the population, hence the ring, changed).
    ("skellam_two_phases", [(0.05, *_engine_like(20000, 2 ** 17, 1.0), 100), (0.02, *_engine_like(20000, 2 ** 15, 1.0), 400)], 1e-5),
]


# The discrete Gaussian cases: name, releases composed (q, sigma, steps), delta.
DISCRETE_GAUSSIAN_CASES = [
    # README's comparison with the sampled continuous Gaussian: 200 rounds at q 0.05, sigma 1.
    ("dgauss_q0.05_sigma1.0_T200", [(0.05, 1.0, 200)], 1e-5),
    # tests/rounds: three and four rounds at q 0.2, sigma 1.1.
    ("dgauss_q0.2_sigma1.1_T3", [(0.2, 1.1, 3)], 1e-5),
    ("dgauss_q0.2_sigma1.1_T4", [(0.2, 1.1, 4)], 1e-5),
    # Typical federated settings, bench/dp's among them.
    ("dgauss_q0.01_sigma1.0_T1000", [(0.01, 1.0, 1000)], 1e-5),
    ("dgauss_q0.05_sigma2.0_T400", [(0.05, 2.0, 400)], 1e-5),
    # A large population's tiny rate.
    ("dgauss_q1e-4_sigma1.0_T10000", [(1e-4, 1.0, 10000)], 1e-5),
    # Little noise: a large epsilon.
    ("dgauss_small_sigma_q0.01_sigma0.3_T100", [(0.01, 0.3, 100)], 1e-5),
    # q above 1/2.
    ("dgauss_q0.6_sigma1.5_T20", [(0.6, 1.5, 20)], 1e-5),
    # q = 1, sigma halved: capped rounds of the unsampled mechanism.
    ("dgauss_q1_sigma0.5_T8", [(1.0, 0.5, 8)], 1e-5),
    # Two phases at different rates.
    ("dgauss_two_phases", [(0.05, 1.0, 200), (0.01, 1.5, 800)], 1e-5),
]


def discrete_gaussian_one_step(q, sigma, alpha):
    sigma = mpf(sigma)
    return zhu_wang(q, alpha, lambda order: mpf(order) / (2 * sigma ** 2))


def compute_discrete_gaussian_case(name, mechanisms, delta):
    # The default orders only: the case is written without its list of orders.
    case = compute_case(name, mechanisms, delta, None, discrete_gaussian_one_step)
    del case["orders"]
    return case


def skellam_plain(l1, l2, v, alpha):
    """Unsampled Skellam RDP at order alpha (an integer's value for a fractional order)."""
    a = mpmath.ceil(alpha)
    return a * l2 ** 2 / (2 * v) + min(((2 * a - 1) * l2 ** 2 + 6 * l1) / (4 * v ** 2), 3 * l1 / (2 * v))


def zhu_wang(q, alpha, plain):
    """Zhu and Wang's bound at order alpha for Poisson sampling at rate q, `plain(order)` the unsampled RDP."""
    q = mpf(q)
    if q == 0:
        return mpf(0)
    if q == 1:
        return plain(mpf(alpha))
    a = int(mpmath.ceil(alpha))
    total = (1 - q) ** (a - 1) * (a * q - q + 1) + mpmath.binomial(a, 2) * q ** 2 * (1 - q) ** (a - 2) * \
        mpmath.exp(plain(2))
    total += 3 * mpmath.fsum(mpmath.binomial(a, l) * (1 - q) ** (a - l) * q ** l *
                             mpmath.exp((l - 1) * plain(l)) for l in range(3, a + 1))
    return min(plain(mpf(alpha)), mpmath.log(total) / (a - 1))


def skellam_one_step(q, l1, l2, v, alpha):
    l1, l2, v = mpf(l1), mpf(l2), mpf(v)
    return zhu_wang(q, alpha, lambda order: skellam_plain(l1, l2, v, order))


def compute_skellam_case(name, mechanisms, delta):
    total = [mpf(0)] * len(ORDERS)
    for q, l1, l2, v, steps in mechanisms:
        for i, alpha in enumerate(ORDERS):
            total[i] += steps * skellam_one_step(q, l1, l2, v, alpha)
    epsilon, order = to_epsilon(ORDERS, total, delta)
    return {
        "name": name,
        "mechanisms": [{"q": q, "l1": l1, "l2": l2, "variance": v, "steps": steps} for q, l1, l2, v, steps in mechanisms],
        "delta": delta,
        "rdp": [float(r) for r in total],
        "epsilon": float(epsilon),
        "order": order,
    }


def binomial_sum(q, sigma, alpha):
    """A for integer alpha: the finite binomial sum, exactly as written."""
    a = int(alpha)
    return mpmath.fsum(mpmath.binomial(a, k) * (1 - q) ** (a - k) * q ** k * mpmath.exp((k * k - k) / (2 * sigma ** 2))
                       for k in range(a + 1))


def two_series(q, sigma, alpha):
    """A for fractional alpha: A0 + A1 of Mironov, Talwar, Zhang, Section 3.3, summed as one series in k."""
    z0 = sigma ** 2 * mpmath.log(1 / q - 1) + mpf(1) / 2
    root2_sigma = mpmath.sqrt(2) * sigma

    def term(k):
        c = mpmath.binomial(alpha, k)
        j = alpha - k
        t0 = c * (1 - q) ** (alpha - k) * q ** k * mpmath.exp((k * k - k) / (2 * sigma ** 2)) * \
            mpmath.erfc((k - z0) / root2_sigma) / 2
        t1 = c * (1 - q) ** k * q ** j * mpmath.exp((j * j - j) / (2 * sigma ** 2)) * \
            mpmath.erfc((z0 - j) / root2_sigma) / 2
        return t0 + t1

    # Past k > alpha the binomial coefficients alternate in sign and, past the peak near z0 (or
    # alpha - z0), the terms shrink: sum the head term by term and the alternating tail accelerated.
    head_terms = int(max(alpha, abs(z0), abs(alpha - z0))) + 3
    head = mpmath.fsum(term(k) for k in range(head_terms))
    tail = mpmath.nsum(term, [head_terms, mpmath.inf], method="alternating")
    return head + tail


def quadrature(q, sigma, alpha):
    """A from its definition: E over z ~ N(0, sigma^2) of (1 - q + q exp((2z - 1) / (2 sigma^2)))^alpha."""
    z0 = sigma ** 2 * mpmath.log(1 / q - 1) + mpf(1) / 2

    def integrand(z):
        return mpmath.npdf(z, 0, sigma) * (1 - q + q * mpmath.exp((2 * z - 1) / (2 * sigma ** 2))) ** alpha

    # Split where the two Gaussians' weights cross (z0) and near the integrand's bulk (0 and alpha).
    points = sorted({-mpmath.inf, z0, mpf(0), alpha, mpmath.inf})
    return mpmath.quad(integrand, points)


# Writing the table also checks every fractional-order series against quadrature (slow); checking
# the table recomputes the series alone.
VERIFY_SERIES = False


def rdp_one_step(q, sigma, alpha):
    """RDP of one step at order alpha, as an mpf."""
    q, sigma, alpha = mpf(q), mpf(sigma), mpf(alpha)
    if q == 0:
        return mpf(0)
    if q == 1:
        return alpha / (2 * sigma ** 2)
    if alpha == mpmath.floor(alpha):
        a = binomial_sum(q, sigma, alpha)
    else:
        a = two_series(q, sigma, alpha)
        check = quadrature(q, sigma, alpha) if VERIFY_SERIES else a
        if abs(a - check) > mpf(10) ** -30 * (a - 1):
            sys.exit(f"rdp_reference: series and quadrature disagree at q={q} sigma={sigma} alpha={alpha}: "
                     f"{mpmath.nstr(a, 40)} vs {mpmath.nstr(check, 40)}")
    return mpmath.log(a) / (alpha - 1)


def to_epsilon(orders, rdp, delta):
    """(epsilon, order): the smallest bound over the orders, never below 0."""
    delta = mpf(delta)
    best = None
    for alpha, r in zip(orders, rdp):
        a = mpf(alpha)
        # RDP 0 at an order > 1 means equal distributions: epsilon 0 (as core/privacy/src/rdp.cpp).
        bound = mpf(0) if r == 0 else r + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)
        if best is None or bound < best[0]:
            best = (bound, alpha)
    return max(best[0], mpf(0)), best[1]


def compute_case(name, mechanisms, delta, orders, one_step=None):
    orders = ORDERS if orders is None else orders
    one_step = rdp_one_step if one_step is None else one_step
    total = [mpf(0)] * len(orders)
    for q, sigma, steps in mechanisms:
        for i, alpha in enumerate(orders):
            total[i] += steps * one_step(q, sigma, alpha)
    epsilon, order = to_epsilon(orders, total, delta)
    return {
        "name": name,
        "mechanisms": [{"q": q, "sigma": sigma, "steps": steps} for q, sigma, steps in mechanisms],
        "delta": delta,
        "orders": orders,
        "rdp": [float(r) for r in total],
        "epsilon": float(epsilon),
        "order": order,
    }


def compute_table():
    return {
        "about": "Renyi DP of the Poisson-sampled Gaussian mechanism, composed, and its (epsilon, delta): "
                 "written by rdp_reference.py --write, checked by rdp_reference.py --check. rdp[i] is the "
                 "composed RDP at orders[i]; epsilon is attained at order.",
        "digits": mp.dps,
        "orders": ORDERS,
        "cases": [compute_case(*case) for case in CASES],
        "skellam_cases": [compute_skellam_case(*case) for case in SKELLAM_CASES],
        "discrete_gaussian_cases": [compute_discrete_gaussian_case(*case) for case in DISCRETE_GAUSSIAN_CASES],
    }


def differences(expected, actual, where="table"):
    """Every place where `actual` differs from `expected`: numbers beyond 1e-12 relative, anything else at all."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return [] if expected == actual else [f"{where}: {actual!r}, expected {expected!r}"]
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if expected == actual:
            return []
        if abs(actual - expected) <= 1e-12 * max(abs(expected), abs(actual)):
            return []
        return [f"{where}: {actual!r}, expected {expected!r}"]
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            return [f"{where}: keys {sorted(actual)}, expected {sorted(expected)}"]
        return [d for key in expected for d in differences(expected[key], actual[key], f"{where}.{key}")]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(actual)} entries, expected {len(expected)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    return [] if expected == actual else [f"{where}: {actual!r}, expected {expected!r}"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", help="compute the table and write it to FILE")
    mode.add_argument("--check", metavar="FILE", help="recompute the table and compare it with FILE")
    args = parser.parse_args()

    global VERIFY_SERIES
    VERIFY_SERIES = bool(args.write)
    table = compute_table()
    if args.write:
        with open(args.write, "w", encoding="utf-8") as out:
            json.dump(table, out, indent=1)
            out.write("\n")
        for case in table["cases"] + table["skellam_cases"] + table["discrete_gaussian_cases"]:
            print(f"{case['name']}: epsilon {case['epsilon']:.12g} at order {case['order']:g}")
        return 0

    with open(args.check, encoding="utf-8") as f:
        stored = json.load(f)
    found = differences(table, stored)
    if found:
        print(f"{args.check} differs from the recomputed table:", file=sys.stderr)
        for line in found[:20]:
            print("  " + line, file=sys.stderr)
        if len(found) > 20:
            print(f"  ... and {len(found) - 20} more", file=sys.stderr)
        return 1
    cases = len(table["cases"]) + len(table["skellam_cases"]) + len(table["discrete_gaussian_cases"])
    print(f"{args.check}: {cases} cases agree with the recomputed table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
