"""How often the spike rule cries wolf on clean runs, and whether it still sees a real spike: the evidence behind
HealthConfig's defaults (window, warmup, threshold, min_rise).

Clean runs: three tiny models trained on noisy mini-batches (a linear regression with heavy-tailed noise, an MLP
classifier on small batches, a tiny GPT on random tokens), several seeds each, 2000 steps (the GPT 600); their step
losses and gradient norms (the same definition as the monitor's) are judged by the rule for a grid of thresholds. A
false alarm is any flag on these runs. Detection: one value per run multiplied by each ``--spikes`` factor (default
5x and 20x) at a random step past the warm-up, found or not.

Usage: python benchmarks/health_false_alarms.py [--steps 2000] [--seeds 3] [--spikes 5 20]
Prints one row per setting: false alarms per 1000 judged values, and the share of injected spikes found.
"""

from __future__ import annotations

import argparse
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
from ascend_tune.health.spikes import SpikeRule  # noqa: E402
from ascend_tune.testing.models import TinyGPT  # noqa: E402


def grad_norm(model: torch.nn.Module) -> float:
    return float(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])))


def series(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int, loss_of) -> tuple:
    """(losses, gradient norms) of ``steps`` training steps; ``loss_of()`` draws a batch and returns its loss."""
    losses, norms = [], []
    for _ in range(steps):
        loss = loss_of()
        optimizer.zero_grad()
        loss.backward()
        norms.append(grad_norm(model))
        losses.append(loss.item())
        optimizer.step()
    return losses, norms


def regression(seed: int, steps: int) -> tuple:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    w = torch.randn(8, generator=gen)

    def loss_of() -> torch.Tensor:
        x = torch.randn(16, 8, generator=gen)
        noise = torch.distributions.StudentT(4.0).sample((16,)) * 0.5  # heavy-tailed label noise
        return F.mse_loss(model(x).squeeze(1), x @ w + noise)

    return series(model, torch.optim.SGD(model.parameters(), lr=0.01), steps, loss_of)


def classifier(seed: int, steps: int) -> tuple:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    centers = torch.randn(4, 16, generator=gen)

    def loss_of() -> torch.Tensor:
        y = torch.randint(0, 4, (8,), generator=gen)
        return F.cross_entropy(model(centers[y] + 1.5 * torch.randn(8, 16, generator=gen)), y)

    return series(model, torch.optim.Adam(model.parameters(), lr=1e-3), steps, loss_of)


def gpt(seed: int, steps: int) -> tuple:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = TinyGPT()

    def loss_of() -> torch.Tensor:
        ids = torch.randint(0, 32, (4, 9), generator=gen)
        return model(ids[:, :-1].contiguous(), ids[:, 1:].contiguous())

    return series(model, torch.optim.AdamW(model.parameters(), lr=3e-4), steps, loss_of)


def flags(series: list, window: int, warmup: int, threshold: float, min_rise: float, log: bool) -> list:
    rule = SpikeRule(window, warmup, threshold, min_rise, log)
    return [i for i, v in enumerate(series) if rule.judge(v) is not None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--spikes", type=float, nargs="+", default=[5.0, 20.0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = []
    for make, steps in ((regression, args.steps), (classifier, args.steps), (gpt, min(args.steps, 600))):
        for seed in range(args.seeds):
            losses, norms = make(seed, steps)
            runs += [(make.__name__, "loss", losses), (make.__name__, "grad_norm", norms)]
    factors = ", ".join(f"x{k:g}" for k in args.spikes)
    print(f"{len(runs)} clean series ({sum(len(s) for *_, s in runs)} values); spikes injected: {factors}")
    found_heads = " ".join(f"{'found x' + format(k, 'g'):>9}" for k in args.spikes)
    print(f"{'scale':>6} {'window':>6} {'warmup':>6} {'threshold':>9} {'min_rise':>8} {'false/1000':>10} "
          f"{found_heads}  worst series")
    for log, window, warmup, threshold, min_rise in [
        (False, 50, 20, 8.0, 0.5), (False, 50, 20, 10.0, 1.0),
        (True, 50, 20, 4.0, 0.5), (True, 50, 20, 6.0, 0.5), (True, 50, 20, 8.0, 0.5), (True, 50, 20, 10.0, 0.5),
        (True, 20, 10, 8.0, 0.5), (True, 100, 20, 8.0, 0.5),
    ]:
        false, judged, found, worst = 0, 0, [0] * len(args.spikes), (0, "")
        rng = random.Random(0)
        for name, metric, series in runs:
            hits = flags(series, window, warmup, threshold, min_rise, log)
            false += len(hits)
            judged += max(len(series) - warmup, 0)
            if len(hits) > worst[0]:
                worst = (len(hits), f"{name} {metric}: {len(hits)}")
            at = rng.randrange(warmup + window, len(series))
            for j, factor in enumerate(args.spikes):
                spiked = list(series)
                spiked[at] *= factor
                found[j] += at in flags(spiked, window, warmup, threshold, min_rise, log)
        shares = " ".join(f"{n / len(runs):>9.0%}" for n in found)
        print(f"{'log' if log else 'linear':>6} {window:>6} {warmup:>6} {threshold:>9g} {min_rise:>8g} "
              f"{1000 * false / judged:>10.3f} {shares}  {worst[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
