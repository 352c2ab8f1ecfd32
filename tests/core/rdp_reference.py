#!/usr/bin/env python3
"""Reference values for the RDP accountant (core/src/rdp.cpp), computed independently at 50 digits.

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
    sys.exit("rdp_reference.py needs mpmath (Debian: python3-mpmath, which toolchains/install-deps installs)")

mp.dps = 50

# The orders the accountant tracks: keep identical to k_orders in core/src/rdp.cpp (tests/core/rdp_test.cpp
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
        # RDP 0 at an order > 1 means equal distributions: epsilon 0 (as core/src/rdp.cpp).
        bound = mpf(0) if r == 0 else r + mpmath.log((a - 1) / a) - (mpmath.log(delta) + mpmath.log(a)) / (a - 1)
        if best is None or bound < best[0]:
            best = (bound, alpha)
    return max(best[0], mpf(0)), best[1]


def compute_case(name, mechanisms, delta, orders):
    orders = ORDERS if orders is None else orders
    total = [mpf(0)] * len(orders)
    for q, sigma, steps in mechanisms:
        for i, alpha in enumerate(orders):
            total[i] += steps * rdp_one_step(q, sigma, alpha)
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
        for case in table["cases"]:
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
    print(f"{args.check}: {len(table['cases'])} cases agree with the recomputed table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
