"""Training-step Chakra traces (DP x PP, ZeRO): invariants checked exactly on the decoded
files against the IR model (parameter shapes), not against the layout's own numbers."""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
from ir_models import cnn
from test_chakra import attrs, mlp, read_trace
from typer.testing import CliRunner

from irbridge.analysis import analyze, resolve_target
from irbridge.cli.main import app
from irbridge.converters import chakra
from irbridge.converters.chakra._proto import et_def_pb2 as et
from irbridge.converters.chakra.parallel import schedule
from irbridge.errors import IrbridgeError
from irbridge.ir import Model


def traces(folder: Path, prefix: str, world: int) -> list[list[et.Node]]:
    found = sorted(p.name for p in folder.glob("*.et"))
    assert found == sorted(f"{prefix}.{r}.et" for r in range(world))
    out = []
    for r in range(world):
        t = read_trace(folder / f"{prefix}.{r}.et")
        assert t.meta_attrs["rank"] == ("int64_val", r)
        seen: set[int] = set()
        for node in t.nodes:
            assert all(d in seen for d in [*node.data_deps, *node.ctrl_deps]), node.name
            seen.add(node.id)
            assert attrs(node)["is_cpu_op"] == ("bool_val", False)
            if node.type == et.COMP_NODE:
                assert attrs(node)["num_ops"][1] > 0 and attrs(node)["tensor_size"][1] > 0
        out.append(t.nodes)
    return out


def params(model: Model) -> dict[str, int]:
    """Trainable parameter name -> bytes, from the IR's tensors (float, not BN stats)."""
    return {t.name: math.prod(t.shape) * t.dtype.itemsize for t in model.tensors.values()
            if t.dtype.is_float and not t.name.endswith(("running_mean", "running_var"))}


def by_phase(nodes: list[et.Node], phase: str) -> list[et.Node]:
    return [n for n in nodes if attrs(n)["phase"][1] == phase]


@pytest.mark.parametrize("dp", [2, 8])
def test_dp_all_reduce_bytes_are_the_gradient_bytes_of_each_bucket(tmp_path: Path,
                                                                  dp: int) -> None:
    model = mlp(layers=12, width=512)
    out = chakra.write(model, tmp_path / "t", hardware="h100", dp=dp)
    ranks = traces(out, "mlp", dp)
    want = params(mlp(layers=12, width=512))
    assert len(want) == 12 and all(b == 512 * 512 * 4 for b in want.values())
    for nodes in ranks:
        colls = [n for n in nodes if n.type == et.COMM_COLL_NODE]
        seen: list[str] = []
        for c in colls:
            a = attrs(c)
            assert a["comm_type"] == ("int64_val", et.ALL_REDUCE)
            assert a["comm_size"][1] == sum(want[p] for p in a["params"][1])
            assert a["pg_name"] == ("string_val", "1")
            seen += a["params"][1]
        assert sorted(seen) == sorted(want)  # every gradient exactly once
        # 1 MiB per layer, 25 MiB buckets: one bucket
        assert len(colls) == 1
    groups = json.loads((out / "astrasim" / "comm-groups.json").read_text())
    assert groups == {"1": list(range(dp))}
    # every rank runs the same step
    assert all(len(n) == len(ranks[0]) for n in ranks)


def test_buckets_overlap_the_backward_pass(tmp_path: Path) -> None:
    """Small buckets: each all-reduce depends only on the backward nodes of its own
    gradients, so later backward nodes do not wait for it; the optimizer waits for all."""
    model = mlp(layers=8, width=1024)  # 4 MiB per weight
    from irbridge.converters.chakra import layout, plan

    laid = layout(plan(model, resolve_target("h100")), dp=4, bucket_bytes=8 << 20)
    ops = laid.ranks[0]
    colls = [i for i, op in enumerate(ops) if op.kind == "coll"]
    assert len(colls) == 4  # 8 weights, two per bucket
    backward = [i for i, op in enumerate(ops) if op.phase == "backward"]
    first = colls[0]
    assert any(b > first for b in backward)  # backward continues after the first bucket
    assert all(first not in ops[b].deps for b in backward)
    [opt] = [op for op in ops if op.phase == "optimizer"]
    assert set(colls) <= set(opt.deps)
    # the bucket's gradients: the two last layers (backward order)
    assert ops[first].params == ["l7.w", "l6.w"]


def test_backward_flops_and_optimizer(tmp_path: Path) -> None:
    model = mlp(layers=4, width=256)
    out = chakra.write(model, tmp_path / "t", hardware="h100", dp=2)
    [nodes, _] = traces(out, "mlp", 2)
    costs = analyze(mlp(layers=4, width=256), [resolve_target("h100")]).runs[0].costs
    fwd = sum(attrs(n)["num_ops"][1] for n in by_phase(nodes, "forward"))
    bwd = sum(attrs(n)["num_ops"][1] for n in by_phase(nodes, "backward"))
    assert fwd == costs.total.flops
    assert bwd == 2 * costs.total.matmul_flops + costs.total.other_flops
    [opt] = by_phase(nodes, "optimizer")
    assert attrs(opt)["num_ops"][1] == 12 * 4 * 256 * 256  # AdamW, 12 FLOPs per parameter


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_reduce_scatter_then_all_gather(tmp_path: Path, zero: int) -> None:
    model = mlp(layers=6, width=512)
    dp = 4
    out = chakra.write(model, tmp_path / "t", hardware="h100", dp=dp, zero=zero)
    [nodes, *_] = traces(out, "mlp", dp)
    want = params(mlp(layers=6, width=512))
    colls = [n for n in nodes if n.type == et.COMM_COLL_NODE]
    kinds = Counter(attrs(c)["comm_type"][1] for c in colls)
    rs = [c for c in colls if attrs(c)["comm_type"][1] == et.REDUCE_SCATTER]
    assert sum(attrs(c)["comm_size"][1] for c in rs) == sum(want.values())
    gathers = [c for c in colls if attrs(c)["comm_type"][1] == et.ALL_GATHER]
    step_gathers = [c for c in gathers if attrs(c)["phase"][1] == "dp"
                    and "parameters bucket" in c.name]
    assert sum(attrs(c)["comm_size"][1] for c in step_gathers) == sum(want.values()) // dp
    # ZeRO 3: each layer's weight shard is gathered before its forward and its backward
    assert kinds[et.ALL_GATHER] == len(step_gathers) + (2 * 6 if zero == 3 else 0)
    opt = by_phase(nodes, "optimizer")
    assert sum(attrs(o)["num_ops"][1] for o in opt) == 12 * 6 * 512 * 512 // dp


@pytest.mark.parametrize(("pp", "mbs", "dp"), [(2, 1, 1), (3, 4, 2), (4, 8, 1)])
def test_pipeline_1f1b_every_send_has_its_recv(tmp_path: Path, pp: int, mbs: int,
                                              dp: int) -> None:
    model = mlp(layers=12)
    out = chakra.write(model, tmp_path / "t", hardware="h100", pp=pp, microbatches=mbs, dp=dp)
    ranks = traces(out, "mlp", pp * dp)
    sends, recvs = Counter(), Counter()
    for rank, nodes in enumerate(ranks):
        for n in nodes:
            a = attrs(n)
            key = (a.get("comm_src", (0, -1))[1], a.get("comm_dst", (0, -1))[1],
                   a.get("comm_tag", (0, -1))[1], a.get("comm_size", (0, -1))[1])
            if n.type == et.COMM_SEND_NODE:
                assert key[0] == rank
                sends[key] += 1
            elif n.type == et.COMM_RECV_NODE:
                assert key[1] == rank
                recvs[key] += 1
        # the compute sequence follows 1F1B: forward/backward blocks per micro-batch
        stage = rank // dp
        blocks: list[tuple[str, int]] = []
        for n in nodes:
            if n.type != et.COMP_NODE or attrs(n)["phase"][1] == "optimizer":
                continue
            block = ("F" if attrs(n)["phase"][1] == "forward" else "B",
                     attrs(n)["microbatch"][1])
            if not blocks or blocks[-1] != block:
                blocks.append(block)
        assert blocks == schedule(stage, pp, mbs)
        # compute is one chain in schedule order
        comps = [n for n in nodes if n.type == et.COMP_NODE]
        assert all(list(b.ctrl_deps) == [a.id] for a, b in itertools.pairwise(comps))
    assert sends == recvs and sends
    assert all(v == 1 for v in sends.values())
    # the residual stream crosses each cut: (pp - 1) cuts x mbs x 2 directions x dp replicas
    assert sum(sends.values()) == (pp - 1) * mbs * 2 * dp
    # FLOPs: every stage's forward, per micro-batch, adds up to the model's
    flops = analyze(mlp(layers=12), [resolve_target("h100")]).runs[0].costs.total.flops
    fwd = sum(attrs(n)["num_ops"][1] for nodes in ranks[::dp] for n in by_phase(nodes, "forward"))
    assert fwd == flops * mbs


def test_schedule_1f1b() -> None:
    assert schedule(0, 4, 4) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1),
                                 ("B", 2), ("B", 3)]
    assert schedule(3, 4, 4) == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2),
                                 ("F", 3), ("B", 3)]
    assert schedule(1, 4, 6) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                                 ("F", 4), ("B", 2), ("F", 5), ("B", 3), ("B", 4), ("B", 5)]


def test_cli_training_options(tmp_path: Path) -> None:
    from irbridge import serde

    src = serde.save(cnn(), tmp_path / "cnn.irb", weights="none")
    ok = CliRunner().invoke(app, ["export", str(src), "--to", "chakra", "-o",
                                  str(tmp_path / "t"), "--dp", "2", "--zero", "1"])
    assert ok.exit_code == 0, ok.output
    traces(tmp_path / "t", "cnn", 2)
    for args, match in ((["--tp", "0"], "--tp 0: must be at least 1"),
                        (["--dp", "2", "--devices", "2"], "--devices .* cannot be combined"),
                        (["--pp", "9"], "--pp 9: .*only 2 compute"),
                        (["--zero", "4"], "--zero 4: one of 0, 1, 2, 3"),
                        (["--dp", "0"], "--dp 0: must be at least 1"),
                        # huge degrees are refused from their size, before anything is
                        # built (this ran out of memory): 10^12 ranks or micro-batches
                        (["--dp", str(10**12)], r"1,000,000,000,000 ranks \(at most"),
                        (["--microbatches", str(10**12)], r"would hold 4,000,000,000,000 "),
                        (["--tp", "70000", "--pp", "1"], r"70,000 ranks \(at most 65,536\)"),
                        (["--dp", "200", "--tp", "200", "--pp", "2"], "80,000 ranks")):
        bad = CliRunner().invoke(app, ["export", str(src), "--to", "chakra", "-o",
                                       str(tmp_path / "bad"), *args])
        assert bad.exit_code == 2, bad.output
        assert bad.stderr.count("\n") == 1 and re.search(match, bad.stderr)
        assert not (tmp_path / "bad").exists()
    bad = CliRunner().invoke(app, ["export", str(src), "--to", "scalesim", "-o",
                                   str(tmp_path / "bad"), "--dp", "2"])
    assert bad.exit_code == 2 and "--dp applies to --to chakra" in bad.stderr


def test_library_errors() -> None:
    from irbridge.converters.chakra import layout, plan

    p = plan(cnn(), resolve_target("h100"))
    for kwargs, match in ((dict(dp=0), "--dp 0"), (dict(zero=5), "--zero 5"),
                          (dict(microbatches=0), "--microbatches 0")):
        with pytest.raises(IrbridgeError, match=match):
            layout(p, **kwargs)  # type: ignore[arg-type]


def test_a_graph_without_parameters_has_no_training_step() -> None:
    """Weights as graph inputs (StableHLO --weights-as-args, a weightless model): a step
    with no gradients was written as if it trained."""
    from irbridge.builder import GraphBuilder
    from irbridge.converters.chakra import layout, plan
    from irbridge.dtypes import DType
    from irbridge.ir import Graph, TensorType

    model = Model(name="args")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(DType.FLOAT32, (32, 64)))
    w = graph.add_input("w", TensorType(DType.FLOAT32, (64, 64)))
    graph.set_outputs([b.op("relu", [b.op("matmul", [x, w])])])
    with pytest.raises(IrbridgeError, match=r"^the model has no trainable parameters"):
        layout(plan(model, resolve_target("h100")), dp=2)


def megatron_mlp(width: int = 256, layers: int = 2) -> Model:
    """x -> [linear(width -> 4 width) + relu -> linear(4 width -> width)] x layers."""
    from irbridge.builder import GraphBuilder
    from irbridge.dtypes import DType
    from irbridge.ir import Graph, Tensor, TensorType

    f32 = DType.FLOAT32
    model = Model(name="mlp")
    graph = Graph()
    model.graphs.append(graph)
    b = GraphBuilder(graph, model)
    x = graph.add_input("x", TensorType(f32, (32, width)))
    for i in range(layers):
        up = b.parameter(Tensor(f"b{i}.up", f32, (4 * width, width)))
        down = b.parameter(Tensor(f"b{i}.down", f32, (width, 4 * width)))
        hidden = b.op("relu", [b.op("linear", [x, up], name=f"b{i}.fc1")], name=f"b{i}.relu")
        x = b.op("linear", [hidden, down], name=f"b{i}.fc2")
    graph.set_outputs([x])
    return model


@pytest.mark.parametrize(("tp", "dp"), [(2, 1), (4, 2)])
def test_tensor_parallel_megatron_mlp(tmp_path: Path, tp: int, dp: int) -> None:
    """Column then row: each rank runs 1/T of each layer's FLOPs; the row layer's output is
    all-reduced in the forward, the column layer's input gradient in the backward; each
    rank's weight gradients are 1/T of the layers' parameters."""
    width = 256
    out = chakra.write(megatron_mlp(width), tmp_path / "t", hardware="h100", tp=tp, dp=dp)
    ranks = traces(out, "mlp", tp * dp)
    costs = analyze(megatron_mlp(width), [resolve_target("h100")]).runs[0].costs
    flops_of = {nc.node.outputs[0].name: nc.own_cost.flops for nc in costs.by_node.values()}
    act = 32 * width * 4  # the [32, width] activation entering fc1 and leaving fc2
    groups = json.loads((out / "astrasim" / "comm-groups.json").read_text())
    for rank, nodes in enumerate(ranks):
        fwd = {n.name: n for n in by_phase(nodes, "forward")}
        for i in range(2):
            fc1 = next(n for name, n in fwd.items() if name.startswith(f"b{i}.fc1"))
            fc2 = next(n for name, n in fwd.items() if name.startswith(f"b{i}.fc2"))
            # fc1 and its relu are one fused kernel
            assert attrs(fc1)["num_ops"][1] * tp == flops_of[f"b{i}.fc1"] + flops_of[f"b{i}.relu"]
            assert attrs(fc2)["num_ops"][1] * tp == flops_of[f"b{i}.fc2"]
        tp_colls = [n for n in nodes if attrs(n)["phase"][1] == "tp"]
        fwd_ar = [n for n in tp_colls if "output of" in n.name]
        bwd_ar = [n for n in tp_colls if "input gradient" in n.name]
        assert [attrs(n)["comm_size"][1] for n in fwd_ar] == [act, act]
        # backward runs b1 then b0; b0.fc1 reads the graph input, which needs no gradient
        assert [attrs(n)["comm_size"][1] for n in bwd_ar] == [act]
        assert all(attrs(n)["comm_type"][1] == et.ALL_REDUCE for n in tp_colls)
        members = groups[attrs(tp_colls[0])["pg_name"][1]]
        assert members == [rank // tp * tp + t for t in range(tp)]
        if dp > 1:
            [ar] = [n for n in nodes if attrs(n)["phase"][1] == "dp"]
            assert attrs(ar)["comm_size"][1] == 2 * 2 * (4 * width * width) * 4 // tp
            assert groups[attrs(ar)["pg_name"][1]] == [rank % tp + d * tp for d in range(dp)]


def _attention_model(heads: int, kv_heads: int) -> Model:
    """One attention block of `heads` query heads and `kv_heads` KV heads (head dim 8),
    captured from torch."""
    import torch
    from torch.nn import functional as F

    from irbridge.converters.pytorch import capture

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = torch.nn.Linear(8 * heads, 8 * heads)
            self.kv = torch.nn.Linear(8 * heads, 16 * kv_heads)
            self.out = torch.nn.Linear(8 * heads, 8 * heads)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q = self.q(x).view(b, s, heads, 8).transpose(1, 2)
            k, v = self.kv(x).view(b, s, 2, kv_heads, 8).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, enable_gqa=kv_heads != heads)
            return self.out(y.transpose(1, 2).reshape(b, s, 8 * heads))

    model = capture(Block(), (torch.zeros(2, 16, 8 * heads),), weights=False).model
    model.name = "attn"
    return model


def test_tensor_parallel_degrees_the_split_nodes_cannot_take_are_refused(tmp_path: Path) -> None:
    """Heads split evenly (the serving analysis' rule: T divides the query heads, T and the
    KV heads divide one another), and no weight is split over more ranks than it has rows:
    --tp 5 on 12 heads and --tp 64 on a 32-row weight were written as even 1/T splits."""
    from irbridge.converters.chakra import layout, plan

    target = resolve_target("h100")
    p = plan(_attention_model(12, 12), target)
    for tp in (2, 3, 4, 6, 12):
        assert layout(p, tp=tp).world == tp
    for tp in (5, 8, 24):
        with pytest.raises(IrbridgeError, match=rf"^--tp {tp}: .*\[attention\] has 12 attention "
                                                r"heads and 12 KV heads; .*use one of 1, 2, "
                                                r"3, 4, 6, 12$"):
            layout(p, tp=tp)
    gqa = plan(_attention_model(8, 2), target)
    assert layout(gqa, tp=4).world == 4  # KV heads replicated in pairs
    with pytest.raises(IrbridgeError, match="has 8 attention heads and 2 KV heads"):
        layout(gqa, tp=3)
    mlp = plan(megatron_mlp(width=8), target)  # fc1 [32, 8]: 32 output rows
    assert layout(mlp, tp=32).world == 32
    with pytest.raises(IrbridgeError, match=r"^--tp 64: b0.fc1 .* splits b0.up \[32, 8\] 64 ways "
                                            r"along a dimension of 32; use --tp 32 or less$"):
        layout(mlp, tp=64)
    src = tmp_path / "attn.irb"
    from irbridge import serde

    serde.save(_attention_model(12, 12), src, weights="none")
    bad = CliRunner().invoke(app, ["export", str(src), "--to", "chakra", "-o",
                                   str(tmp_path / "bad"), "--tp", "5"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "12 attention heads" in bad.stderr
    assert not (tmp_path / "bad").exists()


def test_pipeline_sends_gradients_only_of_tensors_made_from_parameters(tmp_path: Path) -> None:
    """A mask (bool) and a float tensor computed from the input alone cross the pipeline
    cut with the activation; autograd sends back only the activation's gradient (a
    gradient of the bool mask was sent)."""
    import torch

    from irbridge.converters.pytorch import capture

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            mask, scale = x > 0, torch.cos(x)
            for layer in self.layers:
                x = layer(x)
            return torch.where(mask, x, 0.0) * scale

    model = capture(Net(), (torch.zeros(64, 256),), weights=False).model
    model.name = "net"
    out = chakra.write(model, tmp_path / "t", hardware="h100", pp=2, microbatches=2)
    first, second = traces(out, "net", 2)
    sent = {n.name.split(" mb")[0].removeprefix("send ") for n in first
            if n.type == et.COMM_SEND_NODE}
    graded = {n.name.split(" mb")[0].removeprefix("send grad ") for n in second
              if n.type == et.COMM_SEND_NODE}
    received = {n.name.split(" mb")[0].removeprefix("recv grad ") for n in first
                if n.type == et.COMM_RECV_NODE}
    assert graded == received
    # of the three, only the second layer's output carries a gradient
    assert sent == {"gt", "cos", "layers_1"} and graded == {"layers_1"}


def test_multihead_attention_packed_weights_are_megatron_split() -> None:
    """nn.MultiheadAttention slices its packed in_proj_weight before each projection: the
    slices are those matmuls' weights (column-parallel), not embedding tables (they were
    taken for vocabulary-parallel lookups, row, with the out projection column); its
    decomposed attention (matmul, softmax, matmul over [B, H, L, S]) takes the heads rule."""
    import torch

    from irbridge.converters.chakra import layout, plan
    from irbridge.converters.pytorch import capture

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(48, 6, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    model = capture(Net(), (torch.zeros(2, 16, 48),), weights=False).model
    p = plan(model, resolve_target("h100"))
    lay = layout(p, tp=2)
    kinds = [lay.split[n.index] for n in p.nodes]
    linear = [k for n, k in zip(p.nodes, kinds, strict=True)
              if any(m.op == "linear" for part in n.partitions for m in part.nodes)]
    assert linear == ["col", "col", "col", "row"], kinds  # q, k, v, out_proj
    assert "split" in kinds and "rep" not in kinds
    for tp in (3, 6):
        assert layout(p, tp=tp).world == tp
    with pytest.raises(IrbridgeError, match=r"--tp 4: .* has 6 attention heads and 6 KV heads"):
        layout(p, tp=4)


def test_a_captured_training_step_is_not_trained_again(tmp_path: Path) -> None:
    """`convert --train` graphs already hold the backward and the optimizer: a training
    step built from one counted a backward of the backward."""
    import torch

    from irbridge.converters.pytorch.train import TrainSpec, capture_train

    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model = capture_train(net, (torch.zeros(8, 16),), train=TrainSpec(loss="mse")).model
    model.name = "step"
    with pytest.raises(IrbridgeError, match=r"^step: already one training step \(`convert "
                                            r"--train`"):
        chakra.write(model, tmp_path / "t", hardware="h100", dp=2)
    assert not (tmp_path / "t").exists()
    assert chakra.write(model, tmp_path / "inference", hardware="h100").is_dir()  # a pipeline
