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
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _native

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    import sympy

__all__ = [
    "SymshardError",
    "Formula",
    "Number",
    "ModelInfo",
    "Memory",
    "RelativeCost",
    "Collective",
    "Stage",
    "PerDevice",
    "Cost",
    "RankRow",
    "Ranking",
    "Timeline",
    "Explanation",
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

_EXACT = re.compile(r"^-?\d+(/\d+)?$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


class SymshardError(Exception):
    """An error of symshard: the command line's message (with ``file:line:column`` where the
    input was a file) and the exit code the command line would return (2: rejected input; 1: a
    file that could not be read or written, or a check that found a discrepancy)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


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


def _opt(v: Any, f: Any) -> Any:
    return None if v is None else f(v)


def _call(args: List[str]) -> List[Any]:
    try:
        docs = _native.run_json(args)
    except _native.NativeError as e:
        message, code = e.args[0] if len(e.args) == 1 else e.args
        raise SymshardError(str(message), int(code)) from None
    return [json.loads(d) for d in docs]


def _one(args: List[str]) -> Any:
    docs = _call(args)
    if len(docs) != 1:
        raise SymshardError(f"`symshard {' '.join(args)}` printed {len(docs)} JSON documents", 1)
    return docs[0]


def _flags(options: Mapping[str, Any]) -> List[str]:
    """Keyword arguments as command-line flags: ``gpus_per_node=8`` → ``--gpus-per-node 8``,
    ``sequence_parallel=True`` → ``--sequence-parallel``; ``None`` and ``False`` are left out."""
    out: List[str] = []
    for k, v in options.items():
        if v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif isinstance(v, (list, tuple)):
            for item in v:
                out += [flag, str(item)]
        else:
            out += [flag, str(v)]
    return out


def _sets(symbols: Optional[Mapping[str, Any]]) -> List[str]:
    out: List[str] = []
    for k, v in (symbols or {}).items():
        out += ["--set", f"{k}={v}"]
    return out


ModelArg = Union[str, "os.PathLike[str]", Mapping[str, Any], Any]


class _ModelFile:
    """A model argument as the command line takes it: a shipped or user model's name, a path, or
    a Hugging Face config (a dict, or an object with ``to_dict()`` such as a ``transformers``
    config) written to a temporary ``config.json``."""

    def __init__(self, model: ModelArg) -> None:
        self.model = model
        self.tmp: Optional[tempfile.TemporaryDirectory[str]] = None

    def __enter__(self) -> str:
        m = self.model
        if isinstance(m, str):
            return m
        if isinstance(m, os.PathLike):
            return os.fspath(m)
        if hasattr(m, "to_dict") and callable(m.to_dict):
            m = m.to_dict()
        if isinstance(m, Mapping):
            self.tmp = tempfile.TemporaryDirectory(prefix="symshard-")
            path = Path(self.tmp.name) / "config.json"
            path.write_text(json.dumps(dict(m), default=str))
            return str(path)
        raise TypeError(
            "model must be a name, a path, a Hugging Face config dict or an object with to_dict(), "
            f"not {type(m).__name__}"
        )

    def __exit__(self, *exc: Any) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()


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
    """One model that ``models()`` lists."""

    name: str
    family: str
    source: str
    params: Optional[int]
    doc: str

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "ModelInfo":
        return ModelInfo(
            name=d["name"],
            family=d.get("family", ""),
            source=d.get("source", ""),
            params=_opt(d.get("params"), _exact),
            doc=d.get("doc", "") or "",
        )


@dataclass(frozen=True)
class Memory:
    """Memory per device, in bytes."""

    params: Number
    grads: Number
    optimizer: Number
    activations: Number
    total: Number

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "Memory":
        return Memory(**{k: _exact(d[k]) for k in ("params", "grads", "optimizer", "activations", "total")})


@dataclass(frozen=True)
class RelativeCost:
    """A strategy's relative cost and its split, in FLOP-equivalents (busiest device, one step)."""

    compute: Number
    comm_intra: Number
    comm_inter: Number
    bubble: Number
    flop_part: Number
    byte_part: Number
    total: Number

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "RelativeCost":
        keys = ("compute", "comm_intra", "comm_inter", "bubble", "flop_part", "byte_part", "total")
        return RelativeCost(**{k: _exact(d[k]) for k in keys})


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
    def _from(d: Mapping[str, Any]) -> "Collective":
        return Collective(
            collective=d["collective"],
            axis=d.get("axis", ""),
            tier=d.get("tier", ""),
            bytes=_exact(d["bytes"]),
            count=int(_exact(d["count"])),
            op=d.get("op", ""),
            tensor=d.get("tensor", ""),
        )


@dataclass(frozen=True)
class Stage:
    """One pipeline stage under a strategy: its layers, FLOPs, HBM cost and memory per device."""

    stage: int
    items: List[Tuple[str, int]]
    flops: Number
    hbm_cost: Number
    memory: Memory

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "Stage":
        return Stage(
            stage=d["stage"],
            items=[(str(n), int(c)) for n, c in d.get("items", [])],
            flops=_exact(d["flops"]),
            hbm_cost=_exact(d["hbm_cost"]),
            memory=Memory._from(d["memory"]),
        )


@dataclass(frozen=True)
class PerDevice:
    """The busiest device's cost under a strategy."""

    strategy: str
    flops: Number
    comm: List[Collective]
    p2p_bytes: Number
    memory: Memory
    feasible: bool
    reason: Optional[str]
    stages: List[Stage]
    per_op: Optional[List[Dict[str, Any]]]

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "PerDevice":
        return PerDevice(
            strategy=d["strategy"],
            flops=_exact(d["flops"]),
            comm=[Collective._from(c) for c in d.get("comm", [])],
            p2p_bytes=_exact(d.get("p2p_bytes", "0")),
            memory=Memory._from(d["memory"]),
            feasible=bool(d.get("feasible", True)),
            reason=d.get("reason"),
            stages=[Stage._from(x) for x in d.get("stages", [])],
            per_op=_opt(d.get("per_op"), lambda rows: [_convert_row(r) for r in rows]),
        )


def _convert_row(r: Mapping[str, Any]) -> Dict[str, Any]:
    """A per-operator row: exact numbers become ints, other text stays text."""
    return {k: (_exact(v) if isinstance(v, str) and _EXACT.match(v) else v) for k, v in r.items()}


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
    def _from(d: Dict[str, Any]) -> "Cost":
        return Cost(
            model=d["model"],
            symbols={k: _exact(v) for k, v in d.get("symbols", {}).items()},
            params=_value(d["params"]),
            flops={p: {c: _value(v) for c, v in cls.items()} for p, cls in d["flops"].items()},
            activations=_value(d["memory"]["activations"]),
            per_op=_opt(d.get("per_op"), lambda rows: [_convert_row(r) for r in rows]),
            per_device=_opt(d.get("per_device"), PerDevice._from),
            raw=d,
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

    @staticmethod
    def _from(d: Mapping[str, Any]) -> "RankRow":
        return RankRow(
            rank=d["rank"],
            dp=d["dp"],
            tp=d["tp"],
            pp=d["pp"],
            microbatches=d["microbatches"],
            schedule=d["schedule"],
            chunks=d["chunks"],
            sequence_parallel=d["sequence_parallel"],
            recompute=d["recompute"],
            zero=d["zero"],
            ep=d["ep"],
            cp=d.get("cp", 1),
            relative_cost=_exact(d["relative_cost"]),
            relative=RelativeCost._from(d["relative"]),
            memory_per_device=_exact(d["memory_per_device"]),
            memory=Memory._from(d["memory"]),
            feasible=d["feasible"],
            reason=d.get("reason"),
            iteration_seconds=d.get("iteration_seconds"),
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
        return k


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

    @staticmethod
    def _from(d: Dict[str, Any]) -> "Ranking":
        br = d.get("balance_range")
        return Ranking(
            model=d["model"],
            devices=d["devices"],
            gpus_per_node=d["gpus_per_node"],
            calibration=d["calibration"],
            rows=[RankRow._from(r) for r in d["strategies"]],
            evaluated=d["evaluated"],
            feasible=d["feasible"],
            rejected=dict(d.get("rejected", {})),
            simulated=d.get("simulated", 0),
            balance_range=None if br is None else (_exact(br[0]), _opt(br[1], _exact)),
            search_seconds=d["search_seconds"],
            raw=d,
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
    fits: bool
    memory_per_device: float
    devices: List[Dict[str, Any]]
    svg: Optional[str]
    raw: Dict[str, Any] = field(repr=False)

    @staticmethod
    def _from(d: Dict[str, Any], svg: Optional[str]) -> "Timeline":
        return Timeline(
            model=d["model"],
            strategy=d["strategy"],
            calibration=d["calibration"],
            device_count=d["device_count"],
            iteration_seconds=d["iteration_seconds"],
            samples_per_second=d["samples_per_second"],
            tokens_per_second=d["tokens_per_second"],
            model_tflops_per_device=d["model_tflops_per_device"],
            mfu=d["mfu"],
            bubble_fraction=d["bubble_fraction"],
            fits=d["fits"],
            memory_per_device=d["memory_per_device"],
            devices=list(d.get("devices", [])),
            svg=svg,
            raw=d,
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
class Explanation:
    """An operator rule: its indices and laws, FLOPs, bytes and derived split table."""

    name: str
    doc: str
    rule: Dict[str, Any]
    flops: Any
    bytes: Any
    split_table: List[Dict[str, Any]]
    raw: Dict[str, Any] = field(repr=False)

    @staticmethod
    def _from(d: Dict[str, Any]) -> "Explanation":
        rule = d.get("rule", {})
        return Explanation(
            name=rule.get("name", ""),
            doc=rule.get("doc", ""),
            rule=rule,
            flops=d.get("flops"),
            bytes=d.get("bytes"),
            split_table=list(d.get("split_table", [])),
            raw=d,
        )

    def to_pandas(self) -> "pandas.DataFrame":
        """The split table, one row per way of splitting."""
        return _pandas().DataFrame(self.split_table)


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
    def _from(d: Mapping[str, Any]) -> "Component":
        return Component(
            group=d["group"],
            name=d["name"],
            a=_exact(d["a"]),
            b=_exact(d["b"]),
            difference=_exact(d["difference"]),
            formula_a=_opt(d.get("formula_a"), Formula),
            formula_b=_opt(d.get("formula_b"), Formula),
            formula_difference=_opt(d.get("formula_difference"), Formula),
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

    @staticmethod
    def _from(d: Dict[str, Any]) -> "Comparison":
        return Comparison(
            model=d["model"],
            a=d["a"]["strategy"],
            b=d["b"]["strategy"],
            components=[Component._from(c) for c in d["components"]],
            cheaper=d["cheaper"],
            wins_on={p["part"]: _exact(p["amount"]) for p in d["wins_on"]},
            loses_on={p["part"]: _exact(p["amount"]) for p in d["loses_on"]},
            raw=d,
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
    return [ModelInfo._from(d) for d in _one(["models"]) if "name" in d]


def _model_flags(
    symbols: Optional[Mapping[str, Any]], attention: Optional[str], rules: Any
) -> List[str]:
    return _sets(symbols) + _flags({"attention": attention, "rules": _opt(rules, os.fspath)})


def _strategy_flags(strategy: Any) -> List[str]:
    if strategy is None:
        return []
    if isinstance(strategy, RankRow):
        return _flags(strategy.knobs())
    if isinstance(strategy, (str, os.PathLike)):
        return ["--strategy", os.fspath(strategy)]
    if isinstance(strategy, Mapping):
        return _flags(strategy)
    raise TypeError(
        f"strategy must be a dict of knobs, a RankRow or a strategy file, not {type(strategy).__name__}"
    )


def cost(
    model: ModelArg,
    *,
    strategy: Any = None,
    symbolic: bool = False,
    per_op: bool = False,
    attention: Optional[str] = None,
    rules: Any = None,
    calib: Optional[str] = None,
    **symbols: Any,
) -> Cost:
    """Parameters, FLOPs and activation memory of a model; with ``strategy`` (a dict of knobs
    such as ``{"tp": 8, "pp": 4}``, a :class:`RankRow` or a strategy file) also the busiest
    device's FLOPs, collectives and memory. Keyword arguments bind model symbols exactly
    (``B=4096``, any size of int)."""
    with _ModelFile(model) as m:
        args = ["cost", m] + _model_flags(symbols, attention, rules)
        args += _flags({"symbolic": symbolic, "per_op": per_op, "calib": calib})
        args += _strategy_flags(strategy)
        return Cost._from(_one(args))


def rank(
    model: ModelArg,
    devices: int,
    *,
    calib: Optional[str] = None,
    top: int = 10,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    rules: Any = None,
    **options: Any,
) -> Ranking:
    """Rank the hybrid-parallel strategies of a model on ``devices`` devices, by relative cost or,
    with ``calib``, by simulated seconds. Other keyword arguments are the command line's options
    (``gpus_per_node=8``, ``memory=80_000_000_000``, ``max_microbatches=64``, …)."""
    with _ModelFile(model) as m:
        args = ["rank", m, "--devices", str(devices), "--top", str(top)]
        args += _model_flags(symbols, attention, rules)
        args += _flags({"calib": calib, **options})
        return Ranking._from(_one(args))


def timeline(
    model: ModelArg,
    strategy: Any,
    calib: str,
    *,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    rules: Any = None,
    svg: bool = False,
    **options: Any,
) -> Timeline:
    """Simulate one training step of ``strategy`` (a dict of knobs, a :class:`RankRow` or a
    strategy file) on the machine of calibration table ``calib``; with ``svg=True`` the result
    carries the Gantt chart as SVG text."""
    with _ModelFile(model) as m, tempfile.TemporaryDirectory(prefix="symshard-") as tmp:
        args = ["timeline", m, "--calib", calib] + _model_flags(symbols, attention, rules)
        args += _strategy_flags(strategy) + _flags(options)
        svg_path = Path(tmp) / "timeline.svg"
        if svg:
            args += ["--svg", str(svg_path)]
        d = _one(args)
        return Timeline._from(d, svg_path.read_text() if svg else None)


def explain(rule: str) -> Explanation:
    """An operator rule (shipped name or file): indices, laws, FLOPs and split table."""
    return Explanation._from(_one(["explain", os.fspath(rule)]))


def report(
    model: ModelArg,
    devices: int,
    output: Union[str, "os.PathLike[str]"],
    *,
    calib: Optional[str] = None,
    top: int = 20,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    rules: Any = None,
    **options: Any,
) -> Path:
    """Write the self-contained HTML report of ``symshard report`` to ``output`` and return its
    path. Other keyword arguments are the search constraints :func:`rank` takes
    (``fix=["tp=8"]``, ``max=["pp=16"]``, ``schedule="1f1b"``, ``no_sp=True``, ``memory="75GB"``,
    ``headroom="10%"``, ``micro_batch_size=2``, ``gpus_per_node=8``, …)."""
    out = Path(output)
    with _ModelFile(model) as m:
        args = ["report", m, "--devices", str(devices), "--top", str(top), "-o", str(out)]
        args += _model_flags(symbols, attention, rules)
        args += _flags({"calib": calib, **options})
        _call(args)
    return out


def compare(
    model: ModelArg,
    a: Any,
    b: Any,
    *,
    calib: Optional[str] = None,
    symbols: Optional[Mapping[str, Any]] = None,
    attention: Optional[str] = None,
    rules: Any = None,
    **options: Any,
) -> Comparison:
    """Two strategies side by side, component by component (``symshard compare``). ``a`` and
    ``b`` are each a knob string (``"tp=8,pp=4,mbs=1,sp"``), a strategy file, or a
    :class:`RankRow`; other keyword arguments are the command line's options."""

    def side(s: Any) -> str:
        if isinstance(s, RankRow):
            k = s.knobs()
            k["sp"] = "on" if k.pop("sequence_parallel") else "off"
            return ",".join(f"{n}={v}" for n, v in k.items())
        if isinstance(s, os.PathLike):
            return str(os.fspath(s))
        if isinstance(s, str):
            return s
        raise TypeError(
            f"a strategy to compare is a knob string, a strategy file or a RankRow, not {type(s).__name__}"
        )

    with _ModelFile(model) as m:
        args = ["compare", m, side(a), side(b)] + _model_flags(symbols, attention, rules)
        args += _flags({"calib": calib, **options})
        return Comparison._from(_one(args))
