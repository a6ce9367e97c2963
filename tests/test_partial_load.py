"""framework/weights/partial_load.py on tiny modules: the exact report of a load (which file
tensor went where, and why the others did not), its texts, and the errors with their messages.
Written against the survivors of `python tests/scripts/mutation.py weights.partial_load`."""

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from framework.errors import CheckpointError, ConfigError
from framework.weights.partial_load import LoadSpec, load_into, match_weights, weights_in_file


def exactly(text):
    return f"^{re.escape(text)}$"


class Net(nn.Module):
    """encoder: conv + BatchNorm (6 learned tensors and a counter); head: conv (2 tensors)."""

    def __init__(self, in_channels=3, width=4, classes=2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(in_channels, width, 3), nn.BatchNorm2d(width))
        self.head = nn.Conv2d(width, classes, 1)


def saved(tmp_path, state, name="weights.pth"):
    torch.save(state, tmp_path / name)
    return str(tmp_path / name)


def numbered(state):
    """The same names, every tensor a distinct value, so that a test sees which one was loaded."""
    return {k: torch.arange(v.numel()).reshape(v.shape).to(v.dtype) + 100 * i for i, (k, v) in enumerate(state.items())}


# ----------------------------------------------------------------------------- LoadSpec


@pytest.mark.parametrize("value, message", [
    (5, "init: expected a file path or {checkpoint: PATH, ...}, got 5"),
    ({"prefix": "model."}, "init.checkpoint: missing (the file to load)"),
    ({"checkpoint": "w.pth", "rename": ["a"]}, "init.rename: expected {regex: replacement}, got ['a']"),
    ({"checkpoint": "w.pth", "min_loaded_ratio": True}, "init.min_loaded_ratio: must be a number in [0, 1], got True"),
    ({"checkpoint": "w.pth", "min_loaded_ratio": "0.5"}, "init.min_loaded_ratio: must be a number in [0, 1], got '0.5'"),
    ({"checkpoint": "w.pth", "min_loaded_ratio": 1.5}, "init.min_loaded_ratio: must be a number in [0, 1], got 1.5"),
    ({"checkpoint": "w.pth", "min_loaded_ratio": -0.1}, "init.min_loaded_ratio: must be a number in [0, 1], got -0.1"),
    ({"checkpoint": "w.pth", "adapt_in_channels": "avg"},
     "init.adapt_in_channels: expected zeros or mean (or null), got 'avg'"),
])
def test_load_spec_mistakes_are_one_line_naming_the_key(value, message):
    with pytest.raises(ConfigError, match=exactly(message)):
        LoadSpec.from_config(value, "init")


def test_load_spec_takes_a_path_or_every_option():
    assert LoadSpec.from_config(Path("w.pth"), "load_from", default_ratio=0.5) == LoadSpec("w.pth", min_loaded_ratio=0.5)
    spec = LoadSpec.from_config({"checkpoint": "w.pth", "prefix": None, "rename": {"^a": "b"}, "strict": True,
                                 "min_loaded_ratio": 1, "adapt_in_channels": "mean"}, "init")
    assert spec == LoadSpec("w.pth", prefix="", rename={"^a": "b"}, strict=True, min_loaded_ratio=1.0,
                            adapt_in_channels="mean")
    assert type(spec.min_loaded_ratio) is float


# ----------------------------------------------------------------------------- files


@pytest.mark.parametrize("layout", ["training checkpoint", "state_dict", "model", "meta beside tensors",
                                    "a tensor named task"])
def test_weights_are_found_in_every_file_layout(tmp_path, layout):
    weights = {"conv.weight": torch.ones(2, 3), "conv.bias": torch.zeros(2)}
    state = {"training checkpoint": {"meta": {"iter": 3}, "task": weights, "optim": {}, "rng": {}},
             "state_dict": {"state_dict": weights, "epoch": 3},
             "model": {"model": weights, "epoch": 3},
             "meta beside tensors": {"meta": {"note": "exported"}, **weights},
             "a tensor named task": {"task": torch.ones(1), **weights}}[layout]
    expected = {"task": torch.ones(1), **weights} if layout == "a tensor named task" else weights
    found = weights_in_file(saved(tmp_path, state))
    assert list(found) == list(expected) and all(torch.equal(found[k], expected[k]) for k in expected)


def test_a_file_without_tensors_names_its_first_keys(tmp_path):
    path = saved(tmp_path, {name: 1 for name in "abcdef"})
    with pytest.raises(CheckpointError, match=exactly(f"{path}: holds no tensors to load (keys: a, b, c, d, e)")):
        weights_in_file(path)


# ----------------------------------------------------------------------------- matching


def test_names_match_with_or_without_wrapper_components_and_exact_names_first():
    zero = torch.zeros(2)
    # a.w: exact in the module (its plain name is shared with module.a.w); b.w: two module keys share
    # the plain name, so it is not guessed; c.w: one module key by its plain name.
    own = {"a.w": zero, "module.a.w": zero, "module.b.w": zero, "_orig_mod.b.w": zero, "module.c.w": zero}
    weights = {"a.w": torch.ones(2), "b.w": torch.ones(2), "c.w": 2 * torch.ones(2), "module.c.w": torch.ones(2)}
    selected, report = match_weights(weights, own, LoadSpec("f.pth"), "m")
    assert report.loaded == [{"key": "a.w", "source": "a.w"}, {"key": "module.c.w", "source": "c.w"}]
    assert list(selected) == ["a.w", "module.c.w"] and torch.equal(selected["module.c.w"], 2 * torch.ones(2))
    # The second file tensor for module.c.w (first come, first taken) and b.w are reported, by source.
    assert report.unexpected == [{"key": "b.w", "source": "b.w", "shape": [2]},
                                 {"key": "c.w", "source": "module.c.w", "shape": [2]}]
    assert report.missing == [{"key": "module.a.w", "shape": [2]}, {"key": "module.b.w", "shape": [2]},
                              {"key": "_orig_mod.b.w", "shape": [2]}]


def test_a_wrapped_module_loads_a_plain_file():
    net = Net()
    own = {f"module.{k}": v for k, v in net.state_dict().items()}  # a DDP-wrapped module's names
    weights = numbered(net.state_dict())
    selected, report = match_weights(weights, own, LoadSpec("f.pth"), "m")
    assert [(e["key"], e["source"]) for e in report.loaded] == [(f"module.{k}", k) for k in weights]
    assert all(torch.equal(selected[f"module.{k}"], v) for k, v in weights.items())
    assert report.counts() == {"loaded": 9, "missing": 0, "unexpected": 0, "shape_mismatched": 0,
                               "outside_prefix": 0, "module_tensors": 9}


def test_prefix_and_the_order_of_the_report():
    own = {"a": torch.zeros(1), "b": torch.zeros(1)}
    weights = {"ema.a": torch.ones(1), "model.z": torch.ones(1), "model.b": torch.ones(1), "ema.b": torch.ones(1),
               "model.a": torch.ones(1), "model.m": torch.ones(3)}
    _, report = match_weights(weights, own, LoadSpec("f.pth", prefix="model."), "m")
    assert report.outside_prefix == 2
    assert [e["key"] for e in report.loaded] == ["a", "b"]  # the module's order, not the file's
    assert report.unexpected == [{"key": "m", "source": "model.m", "shape": [3]},  # sorted by file name
                                 {"key": "z", "source": "model.z", "shape": [1]}]


# ----------------------------------------------------------------------------- the report's texts


def mismatched_report(*, extra_missing=0):
    """A Net file for 3 classes (head reshaped) and without the BatchNorm counter, into a 2-class Net
    with `extra_missing` more tensors the file does not have."""
    net = Net()
    for i in range(extra_missing):
        net.register_buffer(f"extra{i}", torch.zeros(1))
    weights = {k: v for k, v in Net(classes=3).state_dict().items() if not k.endswith("num_batches_tracked")}
    return match_weights(weights, net.state_dict(), LoadSpec("f.pth"), "task.model")[1]


def test_left_random_names_what_keeps_its_initial_values_counters_left_out():
    assert mismatched_report().left_random() == (
        "task.model: loaded 6 of 8 tensors (75%); left at their initial (random) values: "
        "2 of another shape in the file (head.weight, head.bias)")
    assert mismatched_report(extra_missing=3).left_random() == (
        "task.model: loaded 6 of 11 tensors (55%); left at their initial (random) values: "
        "2 of another shape in the file (head.weight, head.bias), 3 not in the file (extra0, extra1, extra2)")
    assert mismatched_report(extra_missing=5).left_random().endswith(
        "5 not in the file (extra0, extra1, extra2, ... (2 more))")
    net = Net()
    _, report = match_weights(net.state_dict(), net.state_dict(), LoadSpec("f.pth"), "task.model")
    assert report.left_random() == "task.model: loaded 8 of 8 tensors (100%); none left at its initial values"


def test_problems_list_ten_of_each_kind():
    own = {f"k{i}": torch.zeros(1) for i in range(12)}
    weights = {"k0": torch.ones(2), "u": torch.ones(1)}
    _, report = match_weights(weights, own, LoadSpec("f.pth"), "m")
    assert report.problems() == ("11 missing: k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, ... (1 more); 1 unexpected: u; "
                                 "1 shape mismatch: k0 [2] vs [1]")


def test_table_and_json_of_a_load_with_every_kind_of_entry(tmp_path):
    net = Net(in_channels=4)
    net.register_buffer("extra", torch.zeros(5))
    file = {f"model.{k}": v for k, v in Net(classes=3).state_dict().items()}
    file.update({"model.aux.weight": torch.ones(7), "ema.head.bias": torch.ones(2)})
    spec = LoadSpec(saved(tmp_path, file), prefix="model.", adapt_in_channels="zeros")
    report = load_into(net, spec, "task.model")
    assert report.table() == "\n".join([
        f"task.model <- {spec.checkpoint}",
        "  loaded              7  67% of the module's 9 tensors besides BatchNorm counters",
        "  missing             1  extra [5]",
        "  unexpected          1  model.aux.weight [7]",
        "  shape mismatch      2  head.weight [3, 4, 1, 1] vs [2, 4, 1, 1], head.bias [3] vs [2]",
        "  outside prefix      1  prefix 'model.'",
        "  adapted             1  encoder.0.weight [4, 3, 3, 3] -> [4, 4, 3, 3] (zeros)"])
    assert report.to_json() == {
        "checkpoint": spec.checkpoint, "prefix": "model.", "rename": {}, "strict": False,
        "counts": {"loaded": 7, "missing": 1, "unexpected": 1, "shape_mismatched": 2, "outside_prefix": 1,
                   "module_tensors": 10, "adapted": 1},
        "loaded": [{"key": "encoder.0.weight", "source": "model.encoder.0.weight", "adapted": "zeros",
                    "checkpoint_shape": [4, 3, 3, 3], "model_shape": [4, 4, 3, 3]},
                   *({"key": k, "source": f"model.{k}"} for k in ("encoder.0.bias", "encoder.1.weight", "encoder.1.bias",
                                                                 "encoder.1.running_mean", "encoder.1.running_var",
                                                                 "encoder.1.num_batches_tracked"))],
        "missing": [{"key": "extra", "shape": [5]}],
        "unexpected": [{"key": "aux.weight", "source": "model.aux.weight", "shape": [7]}],
        "shape_mismatched": [{"key": "head.weight", "source": "model.head.weight", "checkpoint_shape": [3, 4, 1, 1],
                              "model_shape": [2, 4, 1, 1]},
                             {"key": "head.bias", "source": "model.head.bias", "checkpoint_shape": [3],
                              "model_shape": [2]}]}
    # zeros: the file's kernels on the first 3 channels, 0 on the fourth
    assert torch.equal(net.encoder[0].weight[:, :3], file["model.encoder.0.weight"])
    assert not net.encoder[0].weight[:, 3].any()


def test_table_without_prefix_or_adapted_entries(tmp_path):
    net = Net()
    path = saved(tmp_path, net.state_dict())
    table = load_into(net, LoadSpec(path), "m").table()
    assert table.splitlines()[1:] == ["  loaded              9  100% of the module's 8 tensors besides BatchNorm counters",
                                      "  missing             0", "  unexpected          0", "  shape mismatch      0",
                                      "  outside prefix      0", "  adapted             0"]


def test_mean_adaptation_loads_the_repeated_kernels_scaled(tmp_path):
    rgb = numbered(Net().state_dict())
    net = Net(in_channels=6)
    report = load_into(net, LoadSpec(saved(tmp_path, rgb), adapt_in_channels="mean"), "m")
    assert report.counts()["adapted"] == 1 and report.shape_mismatched == []
    kernel = rgb["encoder.0.weight"].float()
    assert torch.equal(net.encoder[0].weight.detach(), torch.cat([kernel, kernel], 1) * 0.5)  # halves: exact


# ----------------------------------------------------------------------------- load_into's errors


def test_only_batchnorm_counters_matching_is_an_error(tmp_path):
    path = saved(tmp_path, {"num_batches_tracked": torch.tensor(5)})
    with pytest.raises(CheckpointError, match=exactly(
            f"bn <- {path}: no tensor but BatchNorm num_batches_tracked counters matched the module's names and "
            "shapes (4 missing: weight, bias, running_mean, running_var); check prefix and rename")):
        load_into(nn.BatchNorm1d(2), LoadSpec(path), "bn")


def test_nothing_under_the_prefix_of_a_module_without_tensors(tmp_path):
    path = saved(tmp_path, {"encoder.w": torch.ones(1)})
    with pytest.raises(CheckpointError, match=exactly(
            f"m <- {path}: no tensor matched the module's names and shapes (nothing under the prefix); "
            "check prefix and rename")):
        load_into(nn.Identity(), LoadSpec(path, prefix="decoder."), "m")


def test_min_loaded_ratio_is_a_lower_bound_that_may_be_met_exactly(tmp_path):
    net = Net()
    half = {k: v for k, v in numbered(net.state_dict()).items() if k.startswith(("encoder.0.", "encoder.1.w", "head.w"))}
    report = load_into(net, LoadSpec(saved(tmp_path, half), min_loaded_ratio=0.5), "m")  # 4 of 8
    assert report.loaded_ratio == 0.5 and torch.equal(net.head.weight.detach(), half["head.weight"])
    single = nn.Linear(2, 2, bias=False)  # one tensor: loaded, 100%
    load_into(single, LoadSpec(saved(tmp_path, {"weight": torch.ones(2, 2)}, "one.pth"), min_loaded_ratio=1.0), "m")
    assert torch.equal(single.weight.detach(), torch.ones(2, 2))


def test_a_scope_checks_its_own_tensors_only(tmp_path):
    # The head is for 3 classes (reshaped, outside the scope): no error, and the ratio is the encoder's.
    file = numbered(Net(classes=3).state_dict())
    net = Net()
    report = load_into(net, LoadSpec(saved(tmp_path, file), min_loaded_ratio=1.0, scope="encoder."), "task.model")
    assert report.scope_ratio() == (6, 6) and report.loaded_ratio == 0.75
    assert torch.equal(net.encoder[1].running_var, file["encoder.1.running_var"])

    head_only = saved(tmp_path, {k: v for k, v in Net().state_dict().items() if k.startswith("head.")}, "head.pth")
    with pytest.raises(CheckpointError, match=exactly(
            f"task.model <- {head_only}: loaded 0 of 6 tensors of encoder besides BatchNorm counters (0%), below "
            "min_loaded_ratio 0.5; 7 missing: encoder.0.weight, encoder.0.bias, encoder.1.weight, encoder.1.bias, "
            "encoder.1.running_mean, encoder.1.running_var, encoder.1.num_batches_tracked")):
        load_into(Net(), LoadSpec(head_only, min_loaded_ratio=0.5, scope="encoder."), "task.model")


def test_tensors_of_another_shape_inside_the_scope_are_weights_of_another_model(tmp_path):
    path = saved(tmp_path, Net(width=5).state_dict())
    with pytest.raises(CheckpointError, match=exactly(
            f"task.model <- {path}: 6 tensors of encoder have another shape in the file (encoder.0.weight "
            "[5, 3, 3, 3] vs [4, 3, 3, 3], encoder.0.bias [5] vs [4], encoder.1.weight [5] vs [4], ... (3 more)): "
            "are these weights of another model?")):
        load_into(Net(), LoadSpec(path, scope="encoder."), "task.model")


def test_a_long_error_is_cut_at_1200_characters(tmp_path):
    long = "x" * 120
    module = nn.ParameterDict({f"{long}{i}": nn.Parameter(torch.zeros(1)) for i in range(12)})
    path = saved(tmp_path, {f"{long}0": torch.ones(1), **{f"other{long}{i}": torch.ones(1) for i in range(12)}})
    with pytest.raises(CheckpointError) as err:
        load_into(module, LoadSpec(path, min_loaded_ratio=0.5), "m")
    assert str(err.value).startswith(f"m <- {path}: loaded 1 of 12 tensors besides BatchNorm counters (8%)")
    assert len(str(err.value)) == 1200
