"""The first-divergence rules of right-but-different kernels, on small hand-written dumps: a matmul's tolerance grows
with its reduction length; an op whose inputs already differ is judged against what they carry (an op that divides is
uncertain, any other op beyond that is named); an input difference far beyond the drift seen so far is not drift."""

from __future__ import annotations

import json
import os

from ascend_tune.cli import main


def tensor(mx, mn=-1.0, mean=0.0, norm=4.0, shape=(8, 512)):
    return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(shape), "Max": mx, "Min": mn, "Mean": mean,
            "Norm": norm, "requires_grad": False}


def write(folder, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "dump.json"), "w") as fh:
        json.dump({"task": "statistics", "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data},
                  fh)
    return str(folder)


def op(inputs, output):
    return {"input_args": inputs, "input_kwargs": {}, "output": [output]}


def compare(tmp_path, capsys, base, target):
    code = main(["compare-dump", write(tmp_path / "base", base), write(tmp_path / "target", target), "--json"])
    return code, json.loads(capsys.readouterr().out)


def chain(linear_max, div_max=None, mul_input=None):
    """linear (K = 512) -> div -> mul; each op's values as given (None: the reference's)."""
    data = {"Functional.linear.0.forward": op([tensor(1.0), tensor(1.0, shape=(512, 512))], tensor(linear_max))}
    data["Tensor.__truediv__.0.forward"] = op([tensor(linear_max), tensor(0.5, 0.01)], tensor(div_max or 2.0))
    data["Tensor.__mul__.0.forward"] = op([tensor(mul_input or div_max or 2.0), tensor(1.0)],
                                          tensor(mul_input or div_max or 2.0))
    return data


def test_a_matmul_may_differ_by_its_reduction_length_and_a_fault_may_not(tmp_path, capsys):
    code, summary = compare(tmp_path / "a", capsys, chain(1.0), chain(1.0 + 5e-5))  # 2 x 2^-24 x 512 = 6.1e-5
    assert summary["first_divergence"] is None and code == 0
    assert summary["closest"]["op"] == "Functional.linear.0.forward" and 0.5 < summary["closest"]["ratio"] < 1
    code, summary = compare(tmp_path / "b", capsys, chain(1.0), chain(1.0 + 1e-3))
    assert code == 1 and summary["first_divergence"]["op"] == "Functional.linear.0.forward"


def test_an_op_that_divides_what_already_differs_is_uncertain(tmp_path, capsys):
    code, summary = compare(tmp_path, capsys, chain(1.0), chain(1.0 + 5e-5, div_max=2.0 * (1 + 1e-3)))
    assert code == 0 and summary["first_divergence"] is None
    (uncertain,) = summary["uncertain"]
    assert uncertain["op"] == "Tensor.__truediv__.0.forward" and uncertain["carried"] > 0


def test_an_input_difference_far_beyond_the_drift_seen_is_named(tmp_path, capsys):
    # kernel noise in the linear, then __mul__ receives a value 1% off: something unrecorded changed it
    code, summary = compare(tmp_path, capsys, chain(1.0), chain(1.0 + 5e-5, mul_input=2.02))
    first = summary["first_divergence"]
    assert code == 1 and first["op"] == "Tensor.__mul__.0.forward" and first["kind"] == "inputs", first


def test_a_reduction_may_differ_by_its_length(tmp_path, capsys):
    def total(value):
        return {"Torch.sum.0.forward": op([tensor(1.0)], tensor(value, value, value, value, shape=()))}

    code, summary = compare(tmp_path / "a", capsys, total(100.0), total(100.0 * (1 + 2e-4)))  # 4096 terms: 4.9e-4
    assert code == 0 and summary["first_divergence"] is None
    code, summary = compare(tmp_path / "b", capsys, total(100.0), total(100.0 * (1 + 1e-3)))
    assert code == 1 and summary["first_divergence"]["op"] == "Torch.sum.0.forward"
