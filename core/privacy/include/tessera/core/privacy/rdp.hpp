// tessera/core/privacy/rdp.hpp — privacy accounting for Poisson-sampled noisy sums.
//
// A differentially private round samples each client with probability q, clips every update to L2 norm
// C and adds noise of scale sigma * C to the sum (sigma: the noise multiplier). One such step has a
// Rényi-DP bound at every order alpha > 1; the bounds of successive steps add up; the sum converts to
// (epsilon, delta)-DP at whichever order gives the smallest epsilon (Balle, Barthe, Gaboardi, Hsu, Sato
// 2020; Canonne, Kamath, Steinke 2020). The accountant keeps that sum at a fixed list of orders: the
// vector is its whole state, and what a checkpoint stores. Three mechanisms: the continuous Gaussian,
// whose sampled bound is exact (Mironov, Talwar, Zhang, "Rényi Differential Privacy of the Sampled
// Gaussian Mechanism", 2019); and the two integer ones a run adds, the discrete Gaussian (the hub's
// noise) and Skellam (the devices' under secure aggregation), sampled by a general bound that holds
// for any mechanism and is looser.
//
//   core::rdp_accountant privacy;
//   const core::discrete_gaussian_mechanism noise{.sigma = sigma};
//   for (round = 1; ...; ++round) {
//     // stop BEFORE the round that would take epsilon past the target
//     if (privacy.epsilon_after(q, noise, 1, 1e-5).epsilon > target_epsilon) break;
//     run_round();
//     privacy.compose(q, noise);
//   }
//   const core::dp_epsilon spent = privacy.epsilon(1e-5);   // spent.epsilon, at order spent.order
//   save(privacy.rdp(), privacy.steps());                    // restore(default_rdp_orders(), rdp, steps)
//
// Arguments outside their ranges below (q outside [0, 1], sigma < 0, delta outside (0, 1), alpha <= 1)
// are bugs of the caller, whose configuration reader bounds them, and assert. A checkpoint's values are
// input: restore() returns an error naming what is wrong.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/base/error.hpp"

namespace tessera::core {

// The orders the accountant tracks, ascending: 1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5 (large
// budgets, where the best order is small), every integer 5..64, then 80, 96, 128, 256 (small budgets,
// few steps). 74 orders; tests/core/rdp_reference.py holds the same list.
[[nodiscard]] std::span<const double> default_rdp_orders() noexcept;

// RDP at order alpha (> 1, finite) of one step of the continuous Gaussian with sampling rate q in
// [0, 1] and noise multiplier sigma >= 0 (noise standard deviation / L2 sensitivity). 0 for q == 0;
// alpha / (2 sigma^2) for q == 1 (the plain Gaussian mechanism); +infinity for sigma == 0 < q. An
// integer order sums alpha terms; a fractional one a series of up to some 10^4 terms (a few
// milliseconds) for the usual sigma.
[[nodiscard]] double sampled_gaussian_rdp(double q, double sigma, double alpha);

// The Skellam mechanism (Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private
// Federated Learning", NeurIPS 2021): an integer vector sum whose one contributor moves it by at most
// l1 in L1 norm and l2 in L2 norm, with symmetric Skellam noise (Poisson(v/2) − Poisson(v/2)) of
// variance `variance` added to every coordinate — what devices adding their shares of discrete noise
// under secure aggregation release. All in the same units (ring steps); l1, l2, variance > 0.
struct skellam_mechanism {
  double l1 = 0;
  double l2 = 0;
  double variance = 0;
};

// RDP of one release at order alpha > 1 (their Corollary 3.6, for integer orders):
//   alpha l2^2 / (2 v) + min(((2 alpha − 1) l2^2 + 6 l1) / (4 v^2), 3 l1 / (2 v)).
// A fractional order takes the bound of the next integer (Rényi divergence never decreases with the
// order), so the accountant's grid serves both mechanisms.
[[nodiscard]] double skellam_rdp(const skellam_mechanism& m, double alpha);

// RDP at order alpha of one Poisson-sampled release (probability q in [0, 1]): the general upper bound
// of Zhu and Wang ("Poisson Subsampled Rényi Differential Privacy", ICML 2019) for any mechanism, from
// its unsampled RDP ε(l) at the integer orders l = 2..α (α = ceil(alpha)),
//   log[(1−q)^(α−1)(αq − q + 1) + C(α,2) q²(1−q)^(α−2) e^ε(2) + 3 Σ_{l=3..α} C(α,l)(1−q)^(α−l) q^l e^((l−1)ε(l))] / (α−1),
// and never more than the unsampled RDP itself.
[[nodiscard]] double sampled_skellam_rdp(double q, const skellam_mechanism& m, double alpha);

// The discrete Gaussian mechanism (Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential
// Privacy", NeurIPS 2020, arXiv:2004.00010): an integer vector sum whose one contributor moves it by at
// most Δ in L2 norm, with independent N_Z(0, (sigma Δ)²) noise, P(x) ∝ exp(−x² / (2 (sigma Δ)²)), on
// every coordinate — what the hub adds when it is trusted with the sums. sigma >= 0: the noise's scale
// parameter over Δ (the discrete Gaussian's variance is slightly below its scale squared).
struct discrete_gaussian_mechanism {
  double sigma = 0;
};

// RDP of one release at order alpha > 1: alpha / (2 sigma^2), as the continuous Gaussian's (their
// Theorem 14: the multivariate discrete Gaussian is (1 / (2 sigma^2))-zCDP, with no extra term; the
// extra term of the distributed discrete Gaussian is for a sum of several devices' draws, which is not
// a discrete Gaussian). +infinity for sigma == 0.
[[nodiscard]] double discrete_gaussian_rdp(const discrete_gaussian_mechanism& m, double alpha);

// RDP at order alpha of one Poisson-sampled release (probability q in [0, 1]): Zhu and Wang's general
// bound above, from ε(l) = l / (2 sigma^2), and never more than alpha / (2 sigma^2). The sampled
// Gaussian's exact analysis is not proven for the discrete Gaussian, so it is not used. The bound holds
// for the continuous Gaussian too (same unsampled RDP), so it is never below sampled_gaussian_rdp();
// at the usual q and sigma it is larger.
[[nodiscard]] double sampled_discrete_gaussian_rdp(double q, const discrete_gaussian_mechanism& m, double alpha);

// An (epsilon, delta) guarantee: epsilon >= 0 (+infinity without privacy), and the order attaining it.
struct dp_epsilon {
  double epsilon;
  double order;
};

// The smallest epsilon over the orders for delta in (0, 1), from RDP values (>= 0, may be +infinity)
// accumulated at `orders` (each > 1; as many as values, at least one). A value of exactly 0 (no steps,
// or q == 0) gives epsilon 0; when every value is infinite, epsilon is +infinity at the first order.
[[nodiscard]] dp_epsilon rdp_to_epsilon(std::span<const double> orders, std::span<const double> rdp, double delta);

// The RDP of all steps so far at default_rdp_orders().
class rdp_accountant {
 public:
  rdp_accountant();  // no steps: RDP 0 at every order

  // Adds `steps` (>= 0) steps with sampling rate q and noise multiplier sigma.
  void compose(double q, double sigma, std::int64_t steps = 1);
  // Adds `steps` Poisson-sampled Skellam releases (the devices' own noise under secure aggregation).
  void compose(double q, const skellam_mechanism& m, std::int64_t steps = 1);
  // Adds `steps` Poisson-sampled discrete Gaussian releases (the hub's noise).
  void compose(double q, const discrete_gaussian_mechanism& m, std::int64_t steps = 1);
  // The guarantee of the steps so far, for delta in (0, 1).
  [[nodiscard]] dp_epsilon epsilon(double delta) const;
  // The guarantee after `more` (>= 0) further steps of (q, sigma), leaving the accountant as it is.
  [[nodiscard]] dp_epsilon epsilon_after(double q, double sigma, std::int64_t more, double delta) const;
  [[nodiscard]] dp_epsilon epsilon_after(double q, const skellam_mechanism& m, std::int64_t more, double delta) const;
  [[nodiscard]] dp_epsilon epsilon_after(double q, const discrete_gaussian_mechanism& m, std::int64_t more, double delta) const;

  [[nodiscard]] std::span<const double> orders() const noexcept { return default_rdp_orders(); }
  // The accumulated RDP, one value per order.
  [[nodiscard]] std::span<const double> rdp() const noexcept { return rdp_; }
  // Steps composed so far (the count a checkpoint stores beside rdp()).
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }

  // An accountant from a checkpoint: `orders` must be default_rdp_orders() exactly, `rdp` one finite
  // value >= 0 per order, `steps` >= 0; otherwise an error (errc::invalid_argument, or
  // errc::not_finite for a NaN or infinity) naming the first wrong order or value.
  [[nodiscard]] static result<rdp_accountant> restore(std::span<const double> orders, std::span<const double> rdp,
                                                      std::int64_t steps);

 private:
  std::vector<double> rdp_;
  std::int64_t steps_ = 0;
};

}  // namespace tessera::core
