"""symshard from Python: rank hybrid-parallel training layouts by exact symbolic cost.

Every function runs the symshard library (the same code as the ``symshard`` command line, in this
process) and returns its results as dataclasses. Exact numbers arrive as Python ``int`` (or
``fractions.Fraction`` where the library's value is a ratio); seconds are ``float``. Symbolic
formulas are :class:`Formula` strings, which turn into sympy expressions with ``.sympy()`` when
sympy is installed. Nothing is computed here: this module only converts.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from . import _native

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    import sympy

__all__ = [
    "SymshardError",
    "SymshardWarning",
    "Formula",
    "Number",
    "ModelInfo",
    "MachineInfo",
    "SourcedNumber",
    "machines",
    "machine_sources",
    "Memory",
    "RelativeCost",
    "Collective",
    "Stage",
    "PerDevice",
    "Cost",
    "RankRow",
    "PartialDomains",
    "Ranking",
    "Timeline",
    "Explanation",
    "Split",
    "SplitCollective",
    "Component",
    "Comparison",
    "models",
    "cost",
    "rank",
    "timeline",
    "explain",
    "report",
    "compare",
    "__version__",
]

__version__: str = _native.version()

Number = Union[int, Fraction]
"""An exact number: an ``int``, or a ``Fraction`` where the library's value is a ratio."""

_T = TypeVar("_T")

_EXACT = re.compile(r"^-?\d+(/\d+)?$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


class SymshardError(Exception):
    """An error of symshard: the command line's message (with ``file:line:column`` where the
    input was a file) and the exit code the command line would return (2: rejected input; 1: a
    file that could not be read or written, or a check that found a discrepancy)."""

    def __init__(self, message: str, exit_code: int, source: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.source = source
        """Where the model was a config dict or object: the JSON text symshard read (the
        config as ``json.dumps(config, indent=2)``), which the message's ``line:column`` points
        into; else ``None``."""


class SymshardWarning(UserWarning):
    """A warning or note of symshard (what the command line prints to stderr as ``warning: …``
    or ``note: …``), such as a strategy that does not fit in memory. The message is the command
    line's, without the ``warning: `` prefix; notes keep their ``note: `` prefix."""


class Formula(str):
    """An exact formula as symshard prints it, such as ``2*B*H^2*L + 3/2*S``."""

    def sympy(self) -> "sympy.Expr":
        """The formula as a sympy expression, every name a sympy Symbol (sympy must be installed)."""
        import sympy

        names = {n: sympy.Symbol(n) for n in _NAME.findall(self)}
        return sympy.sympify(self.replace("^", "**"), locals=names, rational=True)


def _exact(v: Any) -> Number:
    """An exact number from the library's JSON (a decimal string, or ``p/q``)."""
    if isinstance(v, bool):
        raise TypeError(f"expected an exact number, got {v!r}")
    if isinstance(v, int):
        return v
    if isinstance(v, str) and _EXACT.match(v):
        if "/" in v:
            return Fraction(v)
        return int(v)
    raise ValueError(f"expected an exact number, got {v!r}")


def _value(v: Any) -> Union[Number, Formula]:
    """An exact number where the library gave one, else a formula."""
    if isinstance(v, str) and not _EXACT.match(v):
        return Formula(v)
    return _exact(v)


def _formula(v: Any) -> Union[Number, Formula]:
    """An amount of the typed interface: an exact number as it is, a formula's text as a
    :class:`Formula`."""
    return Formula(v) if isinstance(v, str) else v


def _opt(v: Any, f: Any) -> Any:
    return None if v is None else f(v)


# The typed calls (`cost`, `timeline`, `rank`, `compare`, `models`, `explain`, `report`) return
# the library's warnings and notes as data, re-emitted with `warnings.warn` (`_relay`); nothing is
# read from the process's stderr.


def _stacklevel() -> int:
    """`warnings.warn`'s stacklevel for the first caller outside this module (from `_relay`)."""
    f: Any = sys._getframe(1)
    level = 1
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
        level += 1
    return level


def _relay(text: str) -> None:
    """Re-emits what the library wrote to stderr: ``warning: …`` and ``note: …`` lines (with any
    indented lines that continue them) as :class:`SymshardWarning`, other lines on sys.stderr."""
    items: List[List[str]] = []
    for line in text.splitlines():
        if line[:1].isspace() and items and items[-1][0] == "warn":
            items[-1][1] += "\n" + line
        elif line.startswith("warning: "):
            items.append(["warn", line[len("warning: ") :]])
        elif line.startswith("note: "):
            items.append(["warn", line])
        elif line:
            items.append(["text", line])
    level = _stacklevel()
    for kind, message in items:
        if kind == "warn":
            warnings.warn(message, SymshardWarning, stacklevel=level)
        else:
            print(message, file=sys.stderr)


ModelArg = Union[str, "os.PathLike[str]", Mapping[str, Any], Any]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("to_pandas() needs pandas: pip install pandas") from e
    return pandas


# ---------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class ModelInfo:
    """One model that ``models()`` lists (``family`` is ``None`` for a graph, ``params`` where its
    parameters cannot be counted)."""

    name: str
    family: Optional[str]
    source: str
    params: Optional[int]
    doc: str


@dataclass(frozen=True)
class MachineInfo:
    """One shipped machine that ``machines()`` lists: dense peak FLOP/s by number format, HBM
    bytes per second and bytes, devices per node, link bytes per second per device and direction
    as rated inside and across nodes, and how an all-reduce across nodes runs (``nccl``: NCCL's
    ring or tree, whichever its model times faster)."""

    name: str
    device: str
    peak_flops: Dict[str, Number]
    memory_bandwidth: Number
    memory_capacity: Number
    gpus_per_node: int
    intra_bandwidth: Number
    inter_bandwidth: Number
    inter_algorithm: str
    doc: str


@dataclass(frozen=True)
class SourcedNumber:
    """One number of a machine's table (``path`` as ``device.peak_flops.bf16``), its value as
    text (a decimal, or a curve's points) and its source."""

    path: str
    value: str
    source: str


@dataclass(frozen=True)
class Memory:
    """Memory per device, in bytes."""

    params: Number
    grads: Number
    optimizer: Number
    activations: Number
    total: Number

    @staticmethod
    def _from_native(n: Any) -> "Memory":
        return Memory(n.params, n.grads, n.optimizer, n.activations, n.total)


@dataclass(frozen=True)
class RelativeCost:
    """A strategy's relative cost and its split, in FLOP-equivalents (busiest device, one step).

    ``compute`` is FLOPs and HBM bytes at κ_hbm, a polynomial in the model's symbols;
    ``kernels`` what the kernels take beyond their FLOPs at the matmul plateau (GEMMs below it
    by their sizes, launches), read from the calibration table's curves. ``hidden`` is what
    overlapping the data-parallel traffic (counted in ``comm_intra`` or ``comm_inter``) with
    compute saves: the gradient reduction under the backward, ZeRO 3's weight gathers under
    both passes, less the compute throughput a running collective takes. ``total`` is
    ``compute + kernels + comm_intra + comm_inter + bubble - hidden``.
    """

    compute: Number
    kernels: Number
    comm_intra: Number
    comm_inter: Number
    bubble: Number
    hidden: Number
    flop_part: Number
    byte_part: Number
    total: Number

    @staticmethod
    def _from_native(n: Any) -> "RelativeCost":
        keys = (
            "compute",
            "kernels",
            "comm_intra",
            "comm_inter",
            "bubble",
            "hidden",
            "flop_part",
            "byte_part",
            "total",
        )
        return RelativeCost(**{k: getattr(n, k) for k in keys})


@dataclass(frozen=True)
class Collective:
    """One collective a device runs per step."""

    collective: str
    axis: str
    tier: str
    bytes: Number
    count: int
    op: str
    tensor: str

    @staticmethod
    def _from_native(n: Any) -> "Collective":
        return Collective(n.collective, n.axis, n.tier, n.bytes, n.count, n.op, n.tensor)


@dataclass(frozen=True)
class Stage:
    """One pipeline stage under a strategy: its layers, FLOPs, HBM cost, kernel cost and memory
    per device."""

    stage: int
    items: List[Tuple[str, int]]
    flops: Number
    hbm_cost: Number
    kernel_cost: Number
    memory: Memory

    @staticmethod
    def _from_native(n: Any) -> "Stage":
        return Stage(
            stage=n.stage,
            items=[(str(b), int(c)) for b, c in n.items],
            flops=n.flops,
            hbm_cost=n.hbm_cost,
            kernel_cost=n.kernel_cost,
            memory=Memory._from_native(n.memory),
        )


@dataclass(frozen=True)
class PerDevice:
    """The busiest device's cost under a strategy."""

    strategy: str
    flops: Number
    comm: List[Collective]
    p2p_bytes: Number
    # Of p2p_bytes, under DualPipe, the sum of the rank's copies' gradients with its mirror's.
    grad_sum_bytes: Number
    memory: Memory
    feasible: bool
    reason: Optional[str]
    stages: List[Stage]
    per_op: Optional[List[Dict[str, Any]]]

    @staticmethod
    def _from_native(n: Any) -> "PerDevice":
        return PerDevice(
            strategy=n.strategy,
            flops=n.flops,
            comm=[Collective._from_native(c) for c in n.comm],
            p2p_bytes=n.p2p_bytes,
            grad_sum_bytes=n.grad_sum_bytes,
            memory=Memory._from_native(n.memory),
            feasible=n.feasible,
            reason=n.reason,
            stages=[Stage._from_native(x) for x in n.stages],
            per_op=_opt(n.per_op, lambda rows: [dict(r) for r in rows]),
        )


_TEXT_KEYS = frozenset({"name", "rule", "class", "block", "dp_split", "tp_split"})


def _convert_row(r: Mapping[str, Any]) -> Dict[str, Any]:
    """A per-operator row: exact numbers become ints (or Fractions), formulas (``symbolic=True``)
    :class:`Formula`; names, rules, classes and split descriptions stay text."""
    return {
        k: (_value(v) if isinstance(v, str) and k not in _TEXT_KEYS else v) for k, v in r.items()
    }


@dataclass(frozen=True)
class Cost:
    """What ``cost`` reports: parameters, FLOPs and activation memory of a model (exact numbers,
    or formulas with ``symbolic=True``), and under a strategy the busiest device's share."""

    model: str
    symbols: Dict[str, Number]
    params: Union[Number, Formula]
    flops: Dict[str, Dict[str, Union[Number, Formula]]]
    activations: Union[Number, Formula]
    per_op: Optional[List[Dict[str, Any]]]
    per_device: Optional[PerDevice]
    raw: Dict[str, Any] = field(repr=False)

    @staticmethod
    def _from_native(n: Any) -> "Cost":
        return Cost(
            model=n.model,
            symbols=dict(n.symbols),
            params=_formula(n.params),
            flops={p: {c: _formula(v) for c, v in cls.items()} for p, cls in n.flops.items()},
            activations=_formula(n.activations),
            per_op=_opt(n.per_op, lambda rows: [_convert_row(r) for r in rows]),
            per_device=_opt(n.per_device, PerDevice._from_native),
            raw=n.raw,
        )

    def to_pandas(self) -> "pandas.DataFrame":
        """The per-operator table (``per_op=True``; under a strategy, the device's), else the
        collectives of the strategy, one row each."""
        pd = _pandas()
        if self.per_device is not None and self.per_device.per_op is not None:
            return pd.DataFrame(self.per_device.per_op)
        if self.per_op is not None:
            return pd.DataFrame(self.per_op)
        if self.per_device is not None:
            return pd.DataFrame([c.__dict__ for c in self.per_device.comm])
        raise ValueError("no table: pass per_op=True or a strategy")


@dataclass(frozen=True)
class RankRow:
    """One ranked strategy."""

    rank: int
    dp: int
    tp: int
    pp: int
    microbatches: int
    schedule: str
    chunks: int
    sequence_parallel: bool
    recompute: str
    zero: int
    ep: int
    cp: int
    relative_cost: Number
    relative: RelativeCost
    memory_per_device: Number
    memory: Memory
    feasible: bool
    reason: Optional[str]
    iteration_seconds: Optional[float]
    #: The communication overlaps the row runs with: ``{"tp-comm": …, "grad-reduce": …,
    #: "param-gather": …}`` (``rank(..., overlap="all")`` turns them on where they apply).
    overlap: Dict[str, bool] = field(default_factory=dict)
    #: How weights and gradients are kept in mixed precision: ``"bf16"`` (bf16 weights, fp32
    #: master copy), ``"autocast"`` (fp32 weights under ``torch.autocast``;
    #: ``rank(..., precision="autocast")``), or an FP8 recipe of the linear layers: ``"fp8"``
    #: (per-tensor delayed scaling), ``"fp8-current"``, ``"fp8-block"``, ``"mxfp8"`` or ``"nvfp4"``.
    precision: str = "bf16"
    #: Whether it keeps FP8 parameters (Megatron-LM's ``--fp8-param-gather``;
    #: ``rank(..., fix="fp8-params=on")``).
    fp8_params: bool = False
    #: Whether it dispatches the experts' tokens in FP8 (DeepSeek-V3's FP8 dispatch;
    #: ``rank(..., fix="fp8-dispatch=on")``).
    fp8_dispatch: bool = False
    #: Whether it dispatches the experts' tokens node by node (DeepSeek-V3's node-limited
    #: dispatch through DeepEP; ``rank(..., fix="node-dispatch=on")``).
    node_dispatch: bool = False

    #: Samples per micro-batch and data-parallel rank (``None`` where the batch has no size).
    micro_batch_size: Optional[int] = None
    #: The strategy as one string, as the command line prints it.
    strategy: str = ""
    #: The tensor-parallel layout: ``"annotated"``, ``"auto"`` or ``"auto+e-graph"``.
    layout: str = "annotated"
    #: The software stack the row assumes (``"megatron"``, ``"pytorch-ddp"``,
    #: ``"pytorch-fsdp"``), whose validation error decides a tie.
    stack: str = ""
    #: Ranked by seconds: why this row's place behind #1 is within the model's own error.
    tie: Optional[str] = None

    @staticmethod
    def _from_native(n: Any) -> "RankRow":
        return RankRow(
            rank=n.rank,
            dp=n.dp,
            tp=n.tp,
            pp=n.pp,
            microbatches=n.microbatches,
            schedule=n.schedule,
            chunks=n.chunks,
            sequence_parallel=n.sequence_parallel,
            recompute=n.recompute,
            zero=n.zero,
            ep=n.ep,
            cp=n.cp,
            relative_cost=n.relative_cost,
            relative=RelativeCost._from_native(n.relative),
            memory_per_device=n.memory_per_device,
            memory=Memory._from_native(n.memory),
            feasible=n.feasible,
            reason=n.reason,
            iteration_seconds=n.iteration_seconds,
            overlap=dict(n.overlap),
            precision=n.precision,
            fp8_params=n.fp8_params,
            fp8_dispatch=n.fp8_dispatch,
            node_dispatch=n.node_dispatch,
            micro_batch_size=n.micro_batch_size,
            strategy=n.strategy,
            layout=n.layout,
            stack=n.stack,
            tie=n.tie,
        )

    def knobs(self) -> Dict[str, Any]:
        """The strategy as keyword arguments of :func:`timeline` and :func:`cost`."""
        k: Dict[str, Any] = {
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "microbatches": self.microbatches,
            "chunks": self.chunks,
            "sequence_parallel": self.sequence_parallel,
            "recompute": self.recompute,
            "zero": self.zero,
            "ep": self.ep,
            "cp": self.cp,
        }
        if self.schedule != "none":
            k["schedule"] = self.schedule
        # The overlaps that differ from the defaults, as the timeline's flags.
        if self.overlap.get("tp-comm", False):
            k["tp_comm_overlap"] = True
        if self.overlap.get("param-gather", False):
            k["overlap_param_gather"] = True
        if not self.overlap.get("grad-reduce", True):
            k["no_overlap_grad_reduce"] = True
        if self.precision != "bf16":
            k["precision"] = self.precision
        if self.fp8_params:
            k["fp8_params"] = True
        if self.fp8_dispatch:
            k["fp8_dispatch"] = True
        if self.node_dispatch:
            k["node_dispatch"] = True
        return k


@dataclass(frozen=True)
class PartialDomains:
    """The best strategy on part of each NVLink domain, where the machine's domain is not a
    power of two (64 of each 72-GPU GB200 NVL72 rack, as MLPerf's GB200 systems run), against
    #1 on full domains: ``change`` is its seconds (or relative cost) over #1's, less one."""

    domain_size: int
    gpus_per_domain: int
    domains: int
    full_domains: int
    best: RankRow
    wins: bool
    change: Optional[float]
    straddling: List[str]

    @staticmethod
    def _from_native(n: Any) -> "PartialDomains":
        return PartialDomains(
            domain_size=n.domain_size,
            gpus_per_domain=n.gpus_per_domain,
            domains=n.domains,
            full_domains=n.full_domains,
            best=RankRow._from_native(n.best),
            wins=n.wins,
            change=n.change,
            straddling=list(n.straddling),
        )


@dataclass(frozen=True)
class Ranking:
    """What ``rank`` reports."""

    model: str
    devices: int
    gpus_per_node: int
    calibration: str
    rows: List[RankRow]
    evaluated: int
    feasible: int
    rejected: Dict[str, int]
    simulated: int
    balance_range: Optional[Tuple[Number, Optional[Number]]]
    search_seconds: float
    raw: Dict[str, Any] = field(repr=False)

    #: The library's warnings and notes on this ranking (also given as
    #: :class:`SymshardWarning`), as the command line prints them to stderr.
    warnings: List[str] = field(default_factory=list)
    #: Strategies rejected before pricing, by kind: how many, and one reason.
    rejected_by_kind: Dict[str, Tuple[int, str]] = field(default_factory=dict)
    #: On a machine whose NVLink domain is not a power of two: the best strategy on part of
    #: each domain (:class:`PartialDomains`), else None.
    partial_domains: Optional[PartialDomains] = None
    #: Where the rows' seconds time a low-precision recipe's GEMMs on the table's bf16 matmul
    #: curve (the table has none of that format), one line per precision; empty otherwise.
    borrowed_curves: List[str] = field(default_factory=list)

    @staticmethod
    def _from_native(n: Any) -> "Ranking":
        return Ranking(
            model=n.model,
            devices=n.devices,
            gpus_per_node=n.gpus_per_node,
            calibration=n.calibration,
            rows=[RankRow._from_native(r) for r in n.rows],
            evaluated=n.evaluated,
            feasible=n.feasible,
            rejected=dict(n.rejected),
            simulated=n.simulated,
            balance_range=n.balance_range,
            search_seconds=n.search_seconds,
            raw=n.raw,
            warnings=list(n.warnings),
            rejected_by_kind={k: (int(c), str(e)) for k, (c, e) in n.rejected_by_kind.items()},
            partial_domains=(
                None
                if n.partial_domains is None
                else PartialDomains._from_native(n.partial_domains)
            ),
            borrowed_curves=list(n.borrowed_curves),
        )

    def to_pandas(self) -> "pandas.DataFrame":
        """One row per strategy; the cost split and memory as ``relative.*`` and ``memory.*``
        columns (exact Python ints and Fractions, so the columns have dtype object)."""
        pd = _pandas()
        out = []
        for r in self.rows:
            row = {k: v for k, v in r.__dict__.items() if k not in ("relative", "memory")}
            row.update({f"relative.{k}": v for k, v in r.relative.__dict__.items()})
            row.update({f"memory.{k}": v for k, v in r.memory.__dict__.items()})
            out.append(row)
        return pd.DataFrame(out)


@dataclass(frozen=True)
class Timeline:
    """One training step of a strategy on a machine, simulated (seconds are floats)."""

    model: str
    strategy: str
    calibration: str
    device_count: int
    iteration_seconds: float
    samples_per_second: float
    tokens_per_second: float
    model_tflops_per_device: float
    mfu: float
    bubble_fraction: float
    slowest_device_pace: float
    memory_limit: float
    fits: bool
    memory_per_device: float
    devices: List[Dict[str, Any]]
    svg: Optional[str]
    raw: Dict[str, Any] = field(repr=False)
    settings: Dict[str, str] = field(default_factory=dict)

    @staticmethod
    def _from_native(n: Any) -> "Timeline":
        return Timeline(
            model=n.model,
            strategy=n.strategy,
            calibration=n.calibration,
            device_count=n.device_count,
            iteration_seconds=n.iteration_seconds,
            samples_per_second=n.samples_per_second,
            tokens_per_second=n.tokens_per_second,
            model_tflops_per_device=n.model_tflops_per_device,
            mfu=n.mfu,
            bubble_fraction=n.bubble_fraction,
            slowest_device_pace=n.slowest_device_pace,
            memory_limit=n.memory_limit,
            fits=n.fits,
            memory_per_device=n.memory_per_device,
            devices=list(n.devices),
            svg=n.svg,
            raw=n.raw,
            settings=dict(n.settings),
        )

    def to_pandas(self) -> "pandas.DataFrame":
        """Busy seconds per representative device and stream."""
        pd = _pandas()
        rows = []
        for dev in self.devices:
            row = {"id": dev.get("id"), "stage": dev.get("stage")}
            row.update(dev.get("busy", {}))
            rows.append(row)
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class SplitCollective:
    """A collective one way of splitting needs: ``kind`` (``all-reduce``, …) with its reduction
    ``op`` of ``tensor`` on mesh ``axis``; ``size`` the tensor's bytes and ``wire_bytes`` what
    each rank sends, as formulas; the cheaper alternative where the library names one."""

    kind: str
    op: Optional[str]
    axis: str
    tensor: str
    count: int
    size: Formula
    wire_bytes: Formula
    reason: str
    alternative_kind: Optional[str]
    alternative_wire_bytes: Optional[Formula]
    alternative_leaves: Optional[Any]

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "SplitCollective":
        alt = d.get("alternative") or {}
        return SplitCollective(
            kind=d["kind"],
            op=d.get("op"),
            axis=d.get("axis", ""),
            tensor=d.get("tensor", ""),
            count=int(_exact(d.get("count", 1))),
            size=Formula(d["size"]),
            wire_bytes=Formula(d["wire_bytes"]),
            reason=d.get("reason", ""),
            alternative_kind=alt.get("kind"),
            alternative_wire_bytes=_opt(alt.get("wire_bytes"), Formula),
            alternative_leaves=alt.get("leaves"),
        )

    def describe(self) -> str:
        """As the command line's table says it: ``all-reduce(sum) of dw on axis a``."""
        op = f"({self.op})" if self.op else ""
        return f"{self.kind}{op} of {self.tensor} on axis {self.axis}"


@dataclass(frozen=True)
class Split:
    """One row of an operator's split table: which indices are split over which mesh axes
    (``splits``: ``(index, axis, size)``, empty for the whole operator), the compute of each pass,
    the collectives it needs and the bytes saved for backward per device, all as formulas;
    ``forward`` and ``backward`` keep the library's placements of inputs and outputs."""

    splits: List[Tuple[str, str, Formula]]
    forward_compute: Formula
    backward_compute: Formula
    forward_collectives: List[SplitCollective]
    backward_collectives: List[SplitCollective]
    saved_bytes: Formula
    forward: Dict[str, Any] = field(repr=False)
    backward: Dict[str, Any] = field(repr=False)

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "Split":
        fw, bw = d["forward"], d["backward"]
        return Split(
            splits=[(s["index"], s["axis"], Formula(s["size"])) for s in d.get("splits", [])],
            forward_compute=Formula(fw["compute"]),
            backward_compute=Formula(bw["compute"]),
            forward_collectives=[SplitCollective._from(c) for c in fw.get("collectives", [])],
            backward_collectives=[SplitCollective._from(c) for c in bw.get("collectives", [])],
            saved_bytes=Formula(d["saved_bytes"]),
            forward=dict(fw),
            backward=dict(bw),
        )

    def describe(self) -> str:
        """As the command line's table heads it: ``b over a (p_a), n over b (p_b)``."""
        return ", ".join(f"{i} over {a} ({s})" for i, a, s in self.splits) or "whole"


@dataclass(frozen=True)
class Explanation:
    """An operator rule: its indices and laws, FLOPs and bytes (formulas in the rule's indices)
    and the derived split table: ``split_table`` one :class:`Split` per way of splitting,
    ``whole`` the operator unsplit, ``unsplittable`` the indices that cannot be split and why."""

    name: str
    doc: str
    rule: Dict[str, Any]
    flops: Dict[str, Formula]
    bytes: Dict[str, Formula]
    dtype_bytes: Optional[int]
    whole: Optional[Split]
    split_table: List[Split]
    unsplittable: Dict[str, str]
    raw: Dict[str, Any] = field(repr=False)

    @staticmethod
    def _from(d: Dict[str, Any]) -> "Explanation":
        rule = d.get("rule", {})
        table = d.get("split_table") or {}
        return Explanation(
            name=rule.get("name", ""),
            doc=rule.get("doc", ""),
            rule=rule,
            flops={k: Formula(v) for k, v in (d.get("flops") or {}).items()},
            bytes={k: Formula(v) for k, v in (d.get("bytes") or {}).items()},
            dtype_bytes=_opt(table.get("dtype_bytes"), int),
            whole=_opt(table.get("whole"), Split._from),
            split_table=[Split._from(e) for e in table.get("entries", [])],
            unsplittable={u["index"]: u.get("reason", "") for u in table.get("unsplittable", [])},
            raw=d,
        )

    def to_pandas(self) -> "pandas.DataFrame":
        """The split table, one row per way of splitting: the splits as the command line heads
        them, the compute of each pass, the collectives of each pass, the bytes saved."""
        rows = [
            {
                "splits": e.describe(),
                "forward_compute": e.forward_compute,
                "backward_compute": e.backward_compute,
                "forward_collectives": [c.describe() for c in e.forward_collectives],
                "backward_collectives": [c.describe() for c in e.backward_collectives],
                "saved_bytes": e.saved_bytes,
            }
            for e in self.split_table
        ]
        return _pandas().DataFrame(rows)


@dataclass(frozen=True)
class Component:
    """One row of :func:`compare`: strategy A's value, B's, and B − A, exact; with the formulas
    in the model's symbols where the library gives them."""

    group: str
    name: str
    a: Number
    b: Number
    difference: Number
    formula_a: Optional[Formula]
    formula_b: Optional[Formula]
    formula_difference: Optional[Formula]

    @staticmethod
    def _from_native(n: Any) -> "Component":
        return Component(
            group=n.group,
            name=n.name,
            a=n.a,
            b=n.b,
            difference=n.difference,
            formula_a=_opt(n.formula_a, Formula),
            formula_b=_opt(n.formula_b, Formula),
            formula_difference=_opt(n.formula_difference, Formula),
        )


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` reports: two strategies side by side."""

    model: str
    a: str
    b: str
    components: List[Component]
    cheaper: str
    wins_on: Dict[str, Number]
    loses_on: Dict[str, Number]
    raw: Dict[str, Any] = field(repr=False)

    #: The library's warnings and notes (also given as :class:`SymshardWarning`).
    warnings: List[str] = field(default_factory=list)

    @staticmethod
    def _from_native(n: Any) -> "Comparison":
        return Comparison(
            model=n.model,
            a=n.a,
            b=n.b,
            components=[Component._from_native(c) for c in n.components],
            cheaper=n.cheaper,
            wins_on=dict(n.wins_on),
            loses_on=dict(n.loses_on),
            raw=n.raw,
            warnings=list(n.warnings),
        )

    def component(self, group: str, name: str) -> Component:
        """The row ``name`` of ``group`` (``"relative cost"``, ``"total"``, …)."""
        for c in self.components:
            if c.group == group and c.name == name:
                return c
        raise KeyError(f"no component {group!r}/{name!r}")


# ---------------------------------------------------------------------------------------------
# Functions


def models() -> List[ModelInfo]:
    """The models symshard knows: ./models, SYMSHARD_MODEL_PATH, then the shipped ones."""
    return [
        ModelInfo(name=n, family=f, source=s, params=p, doc=d or "")
        for (n, f, s, p, d) in _direct(_native.models)
    ]


def machines() -> List[MachineInfo]:
    """The shipped machines (calibration tables) with their peaks, memory and links."""
    return [MachineInfo(*row) for row in _direct(_native.machines)]


def machine_sources(name: str) -> List[SourcedNumber]:
    """Every number of a machine's table (a shipped name or a calibration file) with its
    source."""
    return [SourcedNumber(*row) for row in _direct(_native.machine_sources, name)]


# The strategy flags of `cost`, `timeline` and `analyze`, and the short names `rank --fix` and
# knob strings use for two of them.
_STRATEGY_KNOBS = (
    "dp", "tp", "pp", "ep", "cp", "micro_batch_size", "microbatches", "schedule", "chunks",
    "sequence_parallel", "recompute", "zero", "precision", "tp_comm_overlap",
    "overlap_param_gather", "no_overlap_grad_reduce", "fp8_params", "fp8_dispatch",
    "node_dispatch",
    "gpus_per_node", "memory", "headroom",
)
_KNOB_ALIASES = {"mbs": "micro_batch_size", "sp": "sequence_parallel"}


def _typed(f: Callable[..., _T], *args: Any, source: Optional[str] = None, **kwargs: Any) -> _T:
    """A call of the library's typed interface, its errors as :class:`SymshardError` (``source``:
    the text a config's ``line:column`` point into) and the warnings its result carries as
    :class:`SymshardWarning`."""
    out = _direct(f, *args, source=source, **kwargs)
    notes = getattr(out, "warnings", None)
    if isinstance(notes, list) and notes:
        _relay("\n".join(notes))
    return out


def _direct(f: Callable[..., _T], *args: Any, source: Optional[str] = None, **kwargs: Any) -> _T:
    """A call of the library's typed interface that returns its warnings as data (nothing is
    read from stderr), its errors as :class:`SymshardError`."""
    try:
        return f(*args, **kwargs)
    except _native.NativeError as e:
        message, code = e.args[0] if len(e.args) == 1 else e.args
        raise SymshardError(str(message), int(code), source) from None


def _modules(modules: Optional[Sequence[str]]) -> Optional[List[str]]:
    """Recompute modules as the library takes them: a list of names (a string is one name, or
    several separated by commas, as on the command line)."""
    if modules is None:
        return None
    if isinstance(modules, str):
        return [m.strip() for m in modules.split(",") if m.strip()]
    out = []
    for m in modules:
        if not isinstance(m, str):
            raise TypeError(f"recompute_modules: a module name is a str, not {type(m).__name__}")
        out.append(m)
    return out


def _native_model(
    model: ModelArg,
    symbols: Optional[Mapping[str, Any]],
    attention: Optional[str],
    rules: Any,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
) -> Tuple["_native.Model", Optional[str]]:
    """The model as the library takes it, and a config's JSON text (else ``None``): a name or
    path as it is; a Hugging Face config (a dict, or an object with ``to_dict()``) as its text
    ``json.dumps(config, indent=2)``, named ``<config dict>`` or ``<ClassName>`` in errors."""
    m = model
    kind, label, text = "name", None, None
    if isinstance(m, str):
        source = m
    elif isinstance(m, os.PathLike):
        source = os.fspath(m)
    else:
        label = "<config dict>"
        if not isinstance(m, Mapping) and hasattr(m, "to_dict") and callable(m.to_dict):
            label = f"<{type(m).__name__}>"
            m = m.to_dict()
        if not isinstance(m, Mapping):
            raise TypeError(
                "model must be a name, a path, a Hugging Face config dict or an object with "
                f"to_dict(), not {type(m).__name__}"
            )
        kind, text = "hf-config", json.dumps(dict(m), indent=2, default=str)
        source = text
    # Exact numbers pass as they are; anything else as text, as a model file writes a value.
    binds = [
        (k, v if isinstance(v, (int, Fraction)) and not isinstance(v, bool) else str(v))
        for k, v in (symbols or {}).items()
    ]
    native = _direct(
        _native.Model,
        source,
        kind=kind,
        label=label,
        symbols=binds,
        attention=attention,
        loss=loss,
        train_metrics=train_metrics or 0,
        dropout=dropout,
        recompute_modules=_modules(recompute_modules),
        rules=_opt(rules, os.fspath),
        source=text,
    )
    return native, text


# The strategy's options that describe the machine rather than the layout.
_MACHINE_KNOBS = ("gpus_per_node", "memory", "headroom")
_MACHINE_OPTIONS = ("gpus_per_node", "memory", "headroom", "stack", "what_if")


def _knob_dict(strategy: Any) -> Optional[Dict[str, Any]]:
    """A strategy's knobs by their long names, or ``None`` for a file or knob string."""
    if isinstance(strategy, RankRow):
        return strategy.knobs()
    if isinstance(strategy, (str, os.PathLike)):
        return None
    if isinstance(strategy, Mapping):
        knobs: Dict[str, Any] = {}
        for k, v in strategy.items():
            name = _KNOB_ALIASES.get(k, k)
            if name not in _STRATEGY_KNOBS:
                raise TypeError(
                    f"unknown strategy knob {k!r} (known: {', '.join(_STRATEGY_KNOBS)}, mbs, sp)"
                )
            knobs[name] = v
        return knobs
    raise TypeError(
        f"strategy must be a dict of knobs, a RankRow or a strategy file, not {type(strategy).__name__}"
    )


def _native_strategy(
    strategy: Any, calib: Optional[str], options: Mapping[str, Any]
) -> Tuple["_native.Strategy", "_native.Machine"]:
    """The strategy and machine as the library takes them: ``options`` are knobs that override
    the strategy's (as the command line's flags beside ``--strategy``) or the machine's
    ``gpus_per_node``, ``memory``, ``stack`` and ``what_if``."""
    knobs = _knob_dict(strategy)
    text = None if knobs is not None else os.fspath(strategy)
    knobs = dict(knobs or {})
    machine = {k: knobs.pop(k) for k in _MACHINE_KNOBS if k in knobs}
    for k, v in options.items():
        if k in _MACHINE_OPTIONS:
            machine[k] = v
        elif _KNOB_ALIASES.get(k, k) in _STRATEGY_KNOBS:
            knobs[_KNOB_ALIASES.get(k, k)] = v
        else:
            raise TypeError(f"unknown option {k!r}")
    st = _typed(_native.Strategy, text, **{k: v for k, v in knobs.items() if v is not None})
    m = _typed(_native.Machine, calib, **{k: v for k, v in machine.items() if v is not None})
    return st, m


def cost(
    model: ModelArg,
    *,
    strategy: Any = None,
    symbolic: bool = False,
    per_op: bool = False,
    attention: Optional[str] = None,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
    rules: Any = None,
    calib: Optional[str] = None,
    **symbols: Any,
) -> Cost:
    """Parameters, FLOPs and activation memory of a model; with ``strategy`` (a dict of knobs
    such as ``{"tp": 8, "pp": 4}``, a :class:`RankRow` or a strategy file) also the busiest
    device's FLOPs, collectives and memory. Keyword arguments bind model symbols exactly
    (``B=4096``, any size of int). With ``symbolic=True`` the model's totals and per-operator
    rows are :class:`Formula` objects; the busiest device's amounts stay exact numbers (the
    library prices a strategy at the model's symbol values)."""
    m, text = _native_model(
        model, symbols, attention, rules, loss, train_metrics, dropout, recompute_modules
    )
    st = machine = None
    if strategy is not None and not (isinstance(strategy, Mapping) and not strategy):
        st, machine = _native_strategy(strategy, calib, {})
    elif calib is not None:
        _typed(_native.Machine, calib)  # a table given is read, so that a bad one is refused
        warnings.warn(
            "note: calib prices a strategy's devices, and no strategy is given (strategy=): "
            "the model's totals do not read it",
            SymshardWarning,
            stacklevel=2,
        )
    n = _typed(
        _native.cost, m, strategy=st, machine=machine, symbolic=symbolic, per_op=per_op, source=text
    )
    return Cost._from_native(n)


# Keyword knobs of `rank` and `report`, as `--fix` names them.
_FIX_KNOBS: Dict[str, str] = {
    "dp": "dp",
    "tp": "tp",
    "pp": "pp",
    "ep": "ep",
    "cp": "cp",
    "mbs": "mbs",
    "micro_batch_size": "mbs",
    "microbatches": "microbatches",
    "chunks": "chunks",
    "zero": "zero",
    "schedule": "schedule",
    "sp": "sp",
    "sequence_parallel": "sp",
    "recompute": "recompute",
    "overlap": "overlap",
    "precision": "precision",
}
# Knobs `--max` caps: `max_tp=8` or `max={"tp": 8}`.
_MAX_KNOBS = ("dp", "tp", "pp", "ep", "cp", "mbs", "micro_batch_size", "microbatches", "chunks", "zero")
# The search's other options, passed as the command line's flags.
_SEARCH_OPTIONS = frozenset(
    {
        "gpus_per_node",
        "memory",
        "headroom",
        "stack",
        "what_if",
        "max_microbatches",
        "max_chunks",
        "no_sp",
        "layouts",
        "pareto",
        "exact",
        "emit",
        "why",
    }
)


def _items(what: str, v: Any) -> List[str]:
    """``fix``/``max`` as given: ``"tp=8,pp=4"``, a list of such strings, or a dict of knobs."""
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, Mapping):
        out = []
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"{what}: knob names are strings, not {k!r}")
            out.append(f"{_FIX_KNOBS.get(k, k)}={_knob_value(x)}")
        return out
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    raise TypeError(f"{what} must be a string such as 'tp=8,pp=4', a list of them or a dict, not {type(v).__name__}")


def _knob_value(v: Any) -> str:
    if v is True:
        return "on"
    if v is False:
        return "off"
    return str(v)


def _search_options(
    fix: Any, max: Any, options: Mapping[str, Any]
) -> Tuple[List[str], List[str], Dict[str, Any]]:
    """The search constraints of `rank` and `report`: the ``--fix`` items (keyword knobs such as
    ``tp=8`` join ``fix``), the ``--max`` items (``max_tp=8`` joins ``max``) and the search's
    other options (``sp=False`` is ``no_sp``); any other keyword is a TypeError naming it."""
    fixed = _items("fix", fix)
    capped = _items("max", max)
    rest: Dict[str, Any] = {}
    for k, v in options.items():
        if k in _SEARCH_OPTIONS:
            rest[k] = v
        elif k in _FIX_KNOBS:
            if v is None:
                continue
            if _FIX_KNOBS[k] == "sp" and v is False:
                rest["no_sp"] = True
            else:
                fixed.append(f"{_FIX_KNOBS[k]}={_knob_value(v)}")
        elif k.startswith("max_") and k[4:] in _MAX_KNOBS:
            if v is not None:
                capped.append(f"{_FIX_KNOBS[k[4:]]}={v}")
        else:
            known = sorted({*_FIX_KNOBS, *(f"max_{n}" for n in _MAX_KNOBS), *_SEARCH_OPTIONS})
            raise TypeError(f"unknown keyword argument {k!r} (known: fix, max, {', '.join(known)})")
    return fixed, capped, rest


def _whole(name: str, v: Any) -> None:
    """A count argument must be an int (a bool is not one, though Python says it is)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, not {type(v).__name__} {v!r}")


def rank(
    model: ModelArg,
    devices: int,
    *,
    calib: Optional[str] = None,
    top: int = 10,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
    rules: Any = None,
    fix: Any = None,
    max: Any = None,
    **knobs: Any,
) -> Ranking:
    """Rank the hybrid-parallel strategies of a model on ``devices`` devices, by relative cost or,
    with ``calib``, by simulated seconds.

    Constraints on the search, as keyword arguments:

    * knobs to fix (``--fix``): ``dp``, ``tp``, ``pp``, ``ep``, ``cp``, ``mbs`` (or
      ``micro_batch_size``), ``microbatches``, ``chunks``, ``zero``, ``schedule``
      (``"gpipe"``, ``"1f1b"``, ``"interleaved-1f1b"``), ``recompute`` (``"none"``,
      ``"selective"``, ``"full"``), ``sp`` (or ``sequence_parallel``; ``sp=False`` is
      ``--no-sp``): ``rank("gpt3-175b", 1024, tp=8, pp=16, zero=1)``;
    * ``fix``: the same as ``--fix`` text (``"tp=8,pp=4"``), a list of such texts or a dict;
    * caps (``--max``): ``max_tp=8``, ``max_pp=16`` (any knob above but schedule, sp and
      recompute), or ``max={"tp": 8}`` / ``max="tp=8"``;
    * the search's options: ``gpus_per_node``, ``memory`` (``"75GB"``), ``headroom``
      (``"10%"``, ``"8GB"`` or an int of bytes), ``max_microbatches``, ``max_chunks``, ``layouts``, ``pareto``, ``exact``,
      ``emit``, ``why``, ``no_sp``;
    * the machine's: ``what_if`` (``"nvlink.bandwidth=x2,domain=16"``, a machine derived from
      ``calib``'s table, ``--with``) and ``stack`` (a stack profile, ``"auto"`` each row on the
      profile of the stack it assumes, ``--stack``; ranks by simulated seconds like ``calib``).

    Any other keyword raises TypeError naming it; a bad value is the library's SymshardError."""
    _whole("devices", devices)
    _whole("top", top)
    fixed, capped, options = _search_options(fix, max, knobs)
    m, text = _native_model(
        model, symbols, attention, rules, loss, train_metrics, dropout, recompute_modules
    )
    # `exact` changes only the command line's tables.
    options.pop("exact", None)
    shape = {
        k: v
        for k in ("gpus_per_node", "memory", "stack", "what_if")
        if (v := options.pop(k, None)) is not None
    }
    machine = None
    if calib is not None or shape:
        machine = _direct(_native.Machine, calib, **shape)
    n = _typed(
        _native.rank,
        m,
        devices,
        machine=machine,
        by_seconds=calib is not None or "stack" in shape,
        top=top,
        fix=",".join(fixed) or None,
        max=",".join(capped) or None,
        source=text,
        **{k: v for k, v in options.items() if v is not None and v is not False},
    )
    return Ranking._from_native(n)


def timeline(
    model: ModelArg,
    strategy: Any,
    calib: str,
    *,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
    rules: Any = None,
    svg: bool = False,
    **options: Any,
) -> Timeline:
    """Simulate one training step of ``strategy`` (a dict of knobs, a :class:`RankRow` or a
    strategy file) on the machine of calibration table ``calib``; with ``svg=True`` the result
    carries the Gantt chart as SVG text. ``options`` are knobs that override the strategy's,
    or the machine's ``gpus_per_node``, ``memory``, ``stack`` and ``what_if``. A strategy that
    does not fit in memory is simulated all the same, with a :class:`SymshardWarning`."""
    m, text = _native_model(
        model, symbols, attention, rules, loss, train_metrics, dropout, recompute_modules
    )
    st, machine = _native_strategy(strategy, calib, options)
    n = _typed(_native.timeline, m, st, machine, svg=svg, source=text)
    return Timeline._from_native(n)


def explain(
    rule: Union[str, "os.PathLike[str]"],
    *,
    rules: Optional[Union[str, "os.PathLike[str]"]] = None,
    dtype_bytes: int = 2,
) -> Explanation:
    """An operator rule (shipped name or file): indices, laws, FLOPs and split table; ``rules``
    a directory of rules loaded beside the shipped ones, ``dtype_bytes`` the element size."""
    if isinstance(dtype_bytes, bool) or not isinstance(dtype_bytes, int):
        raise TypeError(f"dtype_bytes must be an int, not {type(dtype_bytes).__name__}")
    doc, notes = _direct(
        _native.explain,
        os.fspath(rule),
        rules=None if rules is None else os.fspath(rules),
        dtype_bytes=dtype_bytes,
    )
    if notes:
        _relay("\n".join(notes))
    return Explanation._from(doc)


def report(
    model: ModelArg,
    devices: int,
    output: Union[str, "os.PathLike[str]"],
    *,
    calib: Optional[str] = None,
    top: int = 20,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
    rules: Any = None,
    fix: Any = None,
    max: Any = None,
    **knobs: Any,
) -> Path:
    """Write the self-contained HTML report of ``symshard report`` to ``output`` and return its
    path. The search constraints are :func:`rank`'s (``tp=8``, ``sp=False``, ``max_pp=16``,
    ``fix="tp=8"``, ``max={"pp": 16}``, ``memory="75GB"``, ``headroom="10%"``,
    ``gpus_per_node=8``, ``what_if=…``, ``stack="auto"``, …)."""
    _whole("devices", devices)
    _whole("top", top)
    out = Path(output)
    fixed, capped, options = _search_options(fix, max, knobs)
    options.pop("exact", None)  # it changes only the command line's tables
    for k in ("pareto", "emit", "why"):
        if options.pop(k, None) not in (None, False):
            raise TypeError(f"report takes no {k!r} (the report always draws the Pareto frontier)")
    m, text = _native_model(
        model, symbols, attention, rules, loss, train_metrics, dropout, recompute_modules
    )
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
    elif not isinstance(model, Mapping) and callable(getattr(model, "to_dict", None)):
        name = f"<{type(model).__name__}>"
    else:
        name = "<config dict>"
    shape: Dict[str, Any] = {}
    for k in ("gpus_per_node", "memory", "stack", "what_if"):
        v = options.pop(k, None)
        if v is not None:
            shape[k] = v
    machine = _direct(_native.Machine, calib, **shape) if calib is not None or shape else None
    options = {k: v for k, v in options.items() if v is not None and v is not False}
    command = _report_command(name, devices, calib, shape, fixed, capped, options)
    size, notes = _direct(
        _native.report,
        m,
        name,
        devices,
        os.fspath(out),
        command,
        machine=machine,
        by_seconds=calib is not None or "stack" in shape,
        top=top,
        fix=",".join(fixed) or None,
        max=",".join(capped) or None,
        source=text,
        **options,
    )
    _relay("\n".join([*notes, f"wrote {out} ({size} bytes)"]))
    return out


def _report_command(
    name: str,
    devices: int,
    calib: Optional[str],
    shape: Mapping[str, Any],
    fixed: List[str],
    capped: List[str],
    options: Mapping[str, Any],
) -> str:
    """The command line a report says it shows, as ``symshard report`` states its own."""
    words = ["symshard report", name, f"--devices {devices}"]
    if calib is not None:
        words.append(f"--calib {calib}")
    if shape.get("what_if") is not None:
        words.append(f"--with {shape['what_if']}")
    if shape.get("stack") is not None:
        words.append(f"--stack {shape['stack']}")
    flags: List[str] = []
    for key, default in (
        ("gpus_per_node", None),
        ("memory", None),
        ("headroom", None),
        ("max_microbatches", _native.DEFAULT_MAX_MICROBATCHES),
        ("max_chunks", _native.DEFAULT_MAX_CHUNKS),
    ):
        v = shape.get(key, options.get(key))
        if v is not None and v != default:
            flags += ["--" + key.replace("_", "-"), str(v)]
    if fixed:
        flags += ["--fix", ",".join(fixed)]
    if capped:
        flags += ["--max", ",".join(capped)]
    if options.get("no_sp"):
        flags.append("--no-sp")
    if options.get("layouts") is not None:
        flags += ["--layouts", str(options["layouts"])]
    if flags:
        words.append(" ".join(flags))
    return " ".join(words)


def _side_machine(
    calib: Optional[str],
    options: Mapping[str, Any],
    accepted: Sequence[str],
    others: Sequence[str],
) -> Tuple[Optional["_native.Machine"], Dict[str, Any]]:
    """The machine of ``compare`` or ``crossover`` from ``calib`` and its keyword arguments
    ``options`` (each one of ``accepted``; ``None`` where neither is given), and those given. An
    argument neither accepted nor one of the caller's ``others`` is a ``TypeError`` that lists
    them all."""
    shape: Dict[str, Any] = {}
    for k, v in options.items():
        if k not in accepted:
            known = ", ".join(sorted([*accepted, *others]))
            raise TypeError(f"unknown keyword argument {k!r} (known: calib, {known})")
        if v is not None:
            shape[k] = v
    machine = None
    if calib is not None or shape:
        machine = _direct(_native.Machine, calib, **shape)
    return machine, shape


def _side(s: Any, command: str) -> str:
    """A strategy of ``compare`` or ``crossover``: a knob string, a strategy file or a
    :class:`RankRow`, as the command line's argument."""
    if isinstance(s, RankRow):
        k = s.knobs()
        k["sp"] = "on" if k.pop("sequence_parallel") else "off"
        # Overlap flags are words of a knob string (`tp-comm-overlap`).
        return ",".join(n.replace("_", "-") if v is True else f"{n}={v}" for n, v in k.items())
    if isinstance(s, os.PathLike):
        return str(os.fspath(s))
    if isinstance(s, str):
        return s
    raise TypeError(
        f"a strategy to {command} is a knob string, a strategy file or a RankRow, not {type(s).__name__}"
    )


def compare(
    model: ModelArg,
    a: Any,
    b: Any,
    *,
    calib: Optional[str] = None,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
    rules: Any = None,
    **options: Any,
) -> Comparison:
    """Two strategies side by side, component by component (``symshard compare``). ``a`` and
    ``b`` are each a knob string (``"tp=8,pp=4,mbs=1,sp"``), a strategy file, or a
    :class:`RankRow`; other keyword arguments are the machine's ``gpus_per_node``, ``memory``,
    ``stack`` and ``what_if`` and ``plateau`` (every kernel priced at the matmul plateau)."""

    sa, sb = _side(a, "compare"), _side(b, "compare")
    plateau = bool(options.pop("plateau", False))
    options.pop("exact", None)  # it changes only the command line's tables
    machine, shape = _side_machine(calib, options, _MACHINE_OPTIONS, ("plateau", "exact"))
    m, text = _native_model(
        model, symbols, attention, rules, loss, train_metrics, dropout, recompute_modules
    )
    seconds = calib is not None or shape.get("stack") is not None
    n = _typed(_native.compare, m, sa, sb, machine=machine, seconds=seconds, plateau=plateau, source=text)
    return Comparison._from_native(n)


__all__ += ["Crossover", "crossover"]


@dataclass(frozen=True)
class Crossover:
    """What ``crossover`` reports: where strategy A stops beating strategy B as one symbol
    grows, by relative cost, exactly."""

    model: str
    symbol: str
    #: The values examined: ``start, start + step, … stop``.
    start: Number
    stop: Number
    step: Number
    #: Why this step: the one given, or what the strategies need of the symbol.
    step_reason: str
    a: str
    b: str
    calibration: str
    #: ``(from, to, winner)`` in order: ``"A"``, ``"B"``, ``"equal"``, or ``"invalid"`` where
    #: one cannot run (``raw`` says why).
    intervals: List[Tuple[Number, Number, str]]
    #: ``(value, a, b)``: both relative costs at the ends of the intervals, exact.
    boundaries: List[Tuple[Number, Number, Number]]
    #: Whether a cost changes formula over the range (pipeline partition, busiest stage, …).
    piecewise: bool
    raw: Dict[str, Any] = field(repr=False)

    @staticmethod
    def _from_native(n: Any) -> "Crossover":
        return Crossover(
            model=n.model,
            symbol=n.symbol,
            start=n.start,
            stop=n.stop,
            step=n.step,
            step_reason=n.step_reason,
            a=n.a,
            b=n.b,
            calibration=n.calibration,
            intervals=[tuple(i) for i in n.intervals],
            boundaries=[tuple(b) for b in n.boundaries],
            piecewise=n.piecewise,
            raw=n.raw,
        )


def crossover(
    model: ModelArg,
    a: Any,
    b: Any,
    symbol: str,
    *,
    start: Optional[int] = None,
    stop: Optional[int] = None,
    step: Optional[int] = None,
    calib: Optional[str] = None,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    loss: Optional[str] = None,
    train_metrics: Optional[int] = None,
    dropout: Optional[bool] = None,
    recompute_modules: Optional[Sequence[str]] = None,
    rules: Any = None,
    **options: Any,
) -> Crossover:
    """Where strategy ``a`` stops beating strategy ``b`` as model symbol ``symbol`` grows
    (``symshard crossover MODEL A B --in SYMBOL``): ``start``, ``stop`` and ``step`` are
    ``--from``, ``--to`` and ``--step`` (each chosen as the command line chooses it where not
    given); ``a`` and ``b`` are knob strings, strategy files or :class:`RankRow` s; other
    keyword arguments are the machine's ``gpus_per_node``, ``memory`` and ``what_if``."""
    sa, sb = _side(a, "crossover"), _side(b, "crossover")
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if v is not None:
            _whole(name, v)
    machine, _ = _side_machine(calib, options, ("gpus_per_node", "memory", "what_if"), ())
    m, text = _native_model(
        model, symbols, attention, rules, loss, train_metrics, dropout, recompute_modules
    )
    n = _typed(
        _native.crossover,
        m,
        sa,
        sb,
        symbol,
        start=start,
        stop=stop,
        step=step,
        machine=machine,
        source=text,
    )
    return Crossover._from_native(n)


# ---------------------------------------------------------------------------------------------
# Sweeps

__all__ += ["SweepRow", "SweepRows", "SweepResult", "sweep"]


class SweepRow(dict):  # type: ignore[type-arg]
    """One point of a sweep and its best layout, as the Parquet file's columns (``point``,
    ``model``, ``machine``, ``devices``, ``feasible``, ``reason``, ``strategy``, ``tp``, …,
    ``seconds_per_step``, ``mfu``, ``gpu_hours_per_trillion_tokens``, …): a dict whose keys are
    also attributes. Counts are ``int``, rates ``float``, missing values ``None``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class SweepRows(Sequence[SweepRow]):
    """A finished sweep's rows in point order (one per point, infeasible ones included), read from
    its journal as they are asked for: iterating reads them a chunk at a time and slicing reads
    the slice, so a sweep of 10⁵ points is not held in memory. Each read checks that the
    journal still holds the row where the sweep left it (a rerun of the same spec rewrites it
    under a new name, which leaves these rows readable)."""

    _CHUNK = 4096

    def __init__(self, native: Any) -> None:
        self._native = native

    def __len__(self) -> int:
        return len(self._native)

    @overload
    def __getitem__(self, index: int) -> SweepRow: ...

    @overload
    def __getitem__(self, index: slice) -> List[SweepRow]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[SweepRow, List[SweepRow]]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return [SweepRow(d) for d in _direct(self._native.chunk, start, max(start, stop))]
            return [self[i] for i in range(start, stop, step)]
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"sweep rows are indexed by int or slice, not {type(index).__name__}")
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"row {index} of a sweep of {n} points")
        return SweepRow(_direct(self._native.row, i))

    def __iter__(self) -> Iterator[SweepRow]:
        n = len(self)
        for start in range(0, n, self._CHUNK):
            for d in _direct(self._native.chunk, start, min(n, start + self._CHUNK)):
                yield SweepRow(d)

    def __repr__(self) -> str:
        return f"<SweepRows: {len(self)} rows>"


@dataclass(frozen=True)
class SweepResult:
    """What :func:`sweep` wrote and found."""

    output: Path
    """The Parquet file."""
    csv: Path
    """The CSV beside it."""
    journal: Path
    """The journal of finished points, from which a rerun resumes."""
    points: int
    """Points in the grid (one row each, infeasible ones included)."""
    resumed: int
    """Rows read back from the journal instead of run."""
    infeasible: int
    """Points with no layout that fits, each a row that says why."""
    crossovers: List[str]
    """Where the best layout family changes between adjacent points."""
    rows: SweepRows
    """The rows in point order, read from the journal when asked for."""
    executor: str
    """``local`` or ``ray``."""

    def to_pandas(self) -> "pandas.DataFrame":
        """The rows as a pandas DataFrame (pandas must be installed): all of them in memory,
        read from the journal a chunk at a time into one list per column, so that no row is
        held as a dict beside the frame."""
        columns: Dict[str, List[Any]] = {}
        n = 0
        for row in self.rows:
            for key in row:
                if key not in columns:
                    columns[key] = [None] * n
            for key, column in columns.items():
                column.append(row.get(key))
            n += 1
        return _pandas().DataFrame(columns)


_SWEEP_TASK: Any = None


def _sweep_task(ray: Any) -> Any:
    """The Ray task that evaluates points: one per partition, each in its worker's process
    through the library (not the command line)."""
    global _SWEEP_TASK
    if _SWEEP_TASK is None:

        def points(spec: str, indices: List[int]) -> List[str]:
            from symshard import _native as native

            return native.sweep_points(spec, indices)

        _SWEEP_TASK = ray.remote(num_cpus=1)(points)
    return _SWEEP_TASK


def _partitions(pending: List[int], parts: int) -> List[List[int]]:
    """``pending`` cut into at most ``parts`` runs of consecutive points, sizes differing by at
    most one."""
    parts = max(1, min(parts, len(pending)))
    size, extra = divmod(len(pending), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        out.append(pending[start:end])
        start = end
    return [p for p in out if p]


def _run_on_ray(run: Any, spec: str, address: Optional[str], partitions: Optional[int]) -> None:
    try:
        import ray as ray_module
    except ImportError:
        raise SymshardError("executor='ray' needs Ray: pip install 'ray'", 2) from None
    ray: Any = ray_module  # Ray's functions are not all typed
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    elif address is not None:
        raise SymshardError("Ray is already initialised: call sweep() without address=", 2)
    pending = run.pending()
    if not pending:
        return
    cpus = int(ray.cluster_resources().get("CPU", 1))
    parts = partitions if partitions is not None else 4 * max(cpus, 1)
    if parts < 1:
        raise SymshardError(f"partitions must be at least 1, not {parts}", 2)
    task = _sweep_task(ray)
    waiting = [task.remote(spec, chunk) for chunk in _partitions(pending, parts)]
    while waiting:
        ready, waiting = ray.wait(waiting, num_returns=1)
        # Journaled as each partition finishes: an interrupted sweep resumes from here.
        run.record(ray.get(ready[0]))


def sweep(
    spec: Union[str, "os.PathLike[str]"],
    output: Union[str, "os.PathLike[str]"],
    *,
    executor: str = "local",
    jobs: Optional[int] = None,
    address: Optional[str] = None,
    partitions: Optional[int] = None,
) -> SweepResult:
    """Run the sweep of the spec file ``spec`` (as ``symshard sweep SPEC -o OUTPUT``) and write
    ``output`` (``NAME.parquet``), the CSV beside it and the journal from which a rerun resumes.

    ``executor="local"`` runs the points on ``jobs`` threads of this process (default: one per
    core). ``executor="ray"`` spreads them over a Ray cluster: the one already initialised, or
    ``ray.init(address=address)`` (``None``: a local one). Each task evaluates a run of
    consecutive points through the library in its worker's process; ``partitions`` (default: four
    per CPU of the cluster) sets how many tasks. Every worker must read the spec, and the model and
    calibration files it names, at the same paths. Either way the files are the same, bit for bit,
    however the points were partitioned."""
    if executor not in ("local", "ray"):
        raise SymshardError(f"executor must be 'local' or 'ray', not {executor!r}", 2)
    spec_path = os.fspath(Path(spec).resolve())
    run = _typed(_native.SweepRun, spec_path, os.fspath(output))
    if executor == "local":
        _typed(run.run_local, jobs)
    else:
        if jobs is not None:
            raise SymshardError("jobs= is for executor='local'; Ray gives each task one CPU", 2)
        try:
            _run_on_ray(run, spec_path, address, partitions)
        except _native.NativeError as e:
            message, code = e.args[0] if len(e.args) == 1 else e.args
            raise SymshardError(str(message), int(code)) from None
    done = _typed(run.finish)
    return SweepResult(
        output=Path(done.output),
        csv=Path(done.csv),
        journal=Path(done.journal),
        points=done.points,
        resumed=done.resumed,
        infeasible=done.infeasible,
        crossovers=list(done.crossovers),
        rows=SweepRows(done.rows),
        executor=executor,
    )
