# The typed interface of `symshard` (python/symshard/__init__.py). CI runs mypy's stubtest on the
# installed package, so a change of the module that these stubs do not follow fails it.
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, Union, overload

import pandas
import sympy
from typing_extensions import TypeAlias

__all__ = [
    'SymshardError',
    'SymshardWarning',
    'Formula',
    'Number',
    'ModelInfo',
    'MachineInfo',
    'SourcedNumber',
    'machines',
    'machine_sources',
    'Memory',
    'RelativeCost',
    'Collective',
    'Stage',
    'PerDevice',
    'Cost',
    'RankRow',
    'PartialDomains',
    'Ranking',
    'Timeline',
    'Explanation',
    'Split',
    'SplitCollective',
    'Component',
    'Comparison',
    'models',
    'cost',
    'rank',
    'timeline',
    'explain',
    'report',
    'compare',
    'Crossover',
    'crossover',
    '__version__',
    'SweepRow',
    'SweepRows',
    'SweepResult',
    'sweep',
]

__version__: str
Number: TypeAlias = Union[int, Fraction]
ModelArg: TypeAlias = Union[str, os.PathLike[str], Mapping[str, Any], Any]

class SymshardError(Exception):
    message: str
    exit_code: int
    source: str | None
    def __init__(self, message: str, exit_code: int, source: str | None = None) -> None: ...

class SymshardWarning(UserWarning): ...

class Formula(str):
    def sympy(self) -> sympy.Expr: ...

@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str | None
    source: str
    params: int | None
    doc: str

@dataclass(frozen=True)
class MachineInfo:
    name: str
    device: str
    peak_flops: dict[str, Number]
    memory_bandwidth: Number
    memory_capacity: Number
    gpus_per_node: int
    intra_bandwidth: Number
    inter_bandwidth: Number
    inter_algorithm: str
    doc: str

@dataclass(frozen=True)
class SourcedNumber:
    path: str
    value: str
    source: str

@dataclass(frozen=True)
class Memory:
    params: Number
    grads: Number
    optimizer: Number
    activations: Number
    total: Number

@dataclass(frozen=True)
class RelativeCost:
    compute: Number
    kernels: Number
    comm_intra: Number
    comm_inter: Number
    bubble: Number
    hidden: Number
    flop_part: Number
    byte_part: Number
    total: Number

@dataclass(frozen=True)
class Collective:
    collective: str
    axis: str
    tier: str
    bytes: Number
    count: int
    op: str
    tensor: str

@dataclass(frozen=True)
class Stage:
    stage: int
    items: list[tuple[str, int]]
    flops: Number
    hbm_cost: Number
    kernel_cost: Number
    memory: Memory

@dataclass(frozen=True)
class PerDevice:
    strategy: str
    flops: Number
    comm: list[Collective]
    p2p_bytes: Number
    grad_sum_bytes: Number
    memory: Memory
    feasible: bool
    reason: str | None
    stages: list[Stage]
    per_op: list[dict[str, Any]] | None

@dataclass(frozen=True)
class Cost:
    model: str
    symbols: dict[str, Number]
    params: Number | Formula
    flops: dict[str, dict[str, Number | Formula]]
    activations: Number | Formula
    per_op: list[dict[str, Any]] | None
    per_device: PerDevice | None
    raw: dict[str, Any] = field(repr=False)
    def to_pandas(self) -> pandas.DataFrame: ...

@dataclass(frozen=True)
class RankRow:
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
    reason: str | None
    iteration_seconds: float | None
    overlap: dict[str, bool] = ...
    precision: str = ...
    fp8_params: bool = ...
    fp8_dispatch: bool = ...
    node_dispatch: bool = ...
    micro_batch_size: int | None = ...
    strategy: str = ...
    layout: str = ...
    stack: str = ...
    tie: str | None = ...
    def knobs(self) -> dict[str, Any]: ...

@dataclass(frozen=True)
class PartialDomains:
    domain_size: int
    gpus_per_domain: int
    domains: int
    full_domains: int
    best: RankRow
    wins: bool
    change: float | None
    straddling: list[str]

@dataclass(frozen=True)
class Ranking:
    model: str
    devices: int
    gpus_per_node: int
    calibration: str
    rows: list[RankRow]
    evaluated: int
    feasible: int
    rejected: dict[str, int]
    simulated: int
    balance_range: tuple[Number, Number | None] | None
    search_seconds: float
    raw: dict[str, Any] = field(repr=False)
    warnings: list[str] = ...
    rejected_by_kind: dict[str, tuple[int, str]] = ...
    partial_domains: PartialDomains | None = ...
    borrowed_curves: list[str] = ...
    def to_pandas(self) -> pandas.DataFrame: ...

@dataclass(frozen=True)
class Timeline:
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
    devices: list[dict[str, Any]]
    svg: str | None
    raw: dict[str, Any] = field(repr=False)
    settings: dict[str, str] = field(default_factory=dict)
    def to_pandas(self) -> pandas.DataFrame: ...

@dataclass(frozen=True)
class SplitCollective:
    kind: str
    op: str | None
    axis: str
    tensor: str
    count: int
    size: Formula
    wire_bytes: Formula
    reason: str
    alternative_kind: str | None
    alternative_wire_bytes: Formula | None
    alternative_leaves: Any | None
    def describe(self) -> str: ...

@dataclass(frozen=True)
class Split:
    splits: list[tuple[str, str, Formula]]
    forward_compute: Formula
    backward_compute: Formula
    forward_collectives: list[SplitCollective]
    backward_collectives: list[SplitCollective]
    saved_bytes: Formula
    forward: dict[str, Any] = field(repr=False)
    backward: dict[str, Any] = field(repr=False)
    def describe(self) -> str: ...

@dataclass(frozen=True)
class Explanation:
    name: str
    doc: str
    rule: dict[str, Any]
    flops: dict[str, Formula]
    bytes: dict[str, Formula]
    dtype_bytes: int | None
    whole: Split | None
    split_table: list[Split]
    unsplittable: dict[str, str]
    raw: dict[str, Any] = field(repr=False)
    def to_pandas(self) -> pandas.DataFrame: ...

@dataclass(frozen=True)
class Component:
    group: str
    name: str
    a: Number
    b: Number
    difference: Number
    formula_a: Formula | None
    formula_b: Formula | None
    formula_difference: Formula | None

@dataclass(frozen=True)
class Comparison:
    model: str
    a: str
    b: str
    components: list[Component]
    cheaper: str
    wins_on: dict[str, Number]
    loses_on: dict[str, Number]
    raw: dict[str, Any] = field(repr=False)
    warnings: list[str] = ...
    def component(self, group: str, name: str) -> Component: ...

@dataclass(frozen=True)
class Crossover:
    model: str
    symbol: str
    start: Number
    stop: Number
    step: Number
    step_reason: str
    a: str
    b: str
    calibration: str
    intervals: list[tuple[Number, Number, str]]
    boundaries: list[tuple[Number, Number, Number]]
    piecewise: bool
    raw: dict[str, Any] = field(repr=False)

def models() -> list[ModelInfo]: ...
def machines() -> list[MachineInfo]: ...
def machine_sources(name: str) -> list[SourcedNumber]: ...
def cost(
    model: ModelArg,
    *,
    strategy: Any = None,
    symbolic: bool = False,
    per_op: bool = False,
    attention: str | None = None,
    loss: str | None = None,
    train_metrics: int | None = None,
    dropout: bool | None = None,
    recompute_modules: Sequence[str] | None = None,
    rules: Any = None,
    calib: str | None = None,
    **symbols: Any,
) -> Cost: ...
def rank(
    model: ModelArg,
    devices: int,
    *,
    calib: str | None = None,
    top: int = 10,
    symbols: Mapping[str, Any] | None = None,
    attention: str | None = None,
    loss: str | None = None,
    train_metrics: int | None = None,
    dropout: bool | None = None,
    recompute_modules: Sequence[str] | None = None,
    rules: Any = None,
    fix: Any = None,
    max: Any = None,
    **knobs: Any,
) -> Ranking: ...
def timeline(
    model: ModelArg,
    strategy: Any,
    calib: str,
    *,
    symbols: Mapping[str, Any] | None = None,
    attention: str | None = None,
    loss: str | None = None,
    train_metrics: int | None = None,
    dropout: bool | None = None,
    recompute_modules: Sequence[str] | None = None,
    rules: Any = None,
    svg: bool = False,
    **options: Any,
) -> Timeline: ...
def explain(
    rule: str | os.PathLike[str],
    *,
    rules: str | os.PathLike[str] | None = None,
    dtype_bytes: int = 2,
) -> Explanation: ...
def report(
    model: ModelArg,
    devices: int,
    output: str | os.PathLike[str],
    *,
    calib: str | None = None,
    top: int = 20,
    symbols: Mapping[str, Any] | None = None,
    attention: str | None = None,
    loss: str | None = None,
    train_metrics: int | None = None,
    dropout: bool | None = None,
    recompute_modules: Sequence[str] | None = None,
    rules: Any = None,
    fix: Any = None,
    max: Any = None,
    **knobs: Any,
) -> Path: ...
def compare(
    model: ModelArg,
    a: Any,
    b: Any,
    *,
    calib: str | None = None,
    symbols: Mapping[str, Any] | None = None,
    attention: str | None = None,
    loss: str | None = None,
    train_metrics: int | None = None,
    dropout: bool | None = None,
    recompute_modules: Sequence[str] | None = None,
    rules: Any = None,
    **options: Any,
) -> Comparison: ...
def crossover(
    model: ModelArg,
    a: Any,
    b: Any,
    symbol: str,
    *,
    start: int | None = None,
    stop: int | None = None,
    step: int | None = None,
    calib: str | None = None,
    symbols: Mapping[str, Any] | None = None,
    attention: str | None = None,
    loss: str | None = None,
    train_metrics: int | None = None,
    dropout: bool | None = None,
    recompute_modules: Sequence[str] | None = None,
    rules: Any = None,
    **options: Any,
) -> Crossover: ...

class SweepRow(dict[str, Any]):
    def __getattr__(self, name: str) -> Any: ...

class SweepRows(Sequence[SweepRow]):
    def __init__(self, native: Any) -> None: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, index: int) -> SweepRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[SweepRow]: ...
    def __iter__(self) -> Iterator[SweepRow]: ...

@dataclass(frozen=True)
class SweepResult:
    output: Path
    csv: Path
    journal: Path
    points: int
    resumed: int
    infeasible: int
    crossovers: list[str]
    rows: SweepRows
    executor: str
    def to_pandas(self) -> pandas.DataFrame: ...

def sweep(
    spec: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    executor: str = 'local',
    jobs: int | None = None,
    address: str | None = None,
    partitions: int | None = None,
) -> SweepResult: ...
