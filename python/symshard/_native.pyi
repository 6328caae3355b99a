"""The native half of the package: the symshard library, compiled."""

from fractions import Fraction
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, final

__all__ = [
    "NativeError",
    "run_json",
    "version",
    "DEFAULT_MAX_MICROBATCHES",
    "DEFAULT_MAX_CHUNKS",
    "Model",
    "Strategy",
    "Machine",
    "Memory",
    "Collective",
    "Stage",
    "DeviceCost",
    "Cost",
    "Timeline",
    "RelativeCost",
    "RankRow",
    "PartialDomains",
    "Ranking",
    "Component",
    "Comparison",
    "Crossover",
    "cost",
    "timeline",
    "SweepRun",
    "SweepResult",
    "SweepRows",
    "sweep_points",
    "rank",
    "compare",
    "crossover",
    "report",
    "models",
    "machines",
    "machine_sources",
    "explain",
]

DEFAULT_MAX_MICROBATCHES: int
"""The largest micro-batch count `rank` tries unless told otherwise."""
DEFAULT_MAX_CHUNKS: int
"""The most interleaved chunks per device `rank` tries unless told otherwise."""

_Exact = Union[int, Fraction]
_Amount = Union[int, Fraction, str]

class NativeError(Exception):
    """A symshard error; ``args`` is ``(message, exit_code)``."""

def run_json(args: List[str]) -> List[str]:
    """Run ``symshard ARGS...`` (with ``--format json`` where the command takes it) and return
    the JSON documents it prints."""

def version() -> str:
    """The library's version."""

@final
class Model:
    """A model as asked for: a name or path (``kind="name"``), a model file's text
    (``"yaml"``) or a Hugging Face config's JSON text (``"hf-config"``), with its bindings and
    settings."""

    def __new__(
        cls,
        source: str,
        *,
        kind: str = ...,
        label: Optional[str] = ...,
        symbols: Sequence[Tuple[str, Any]] = ...,
        attention: Optional[str] = ...,
        loss: Optional[str] = ...,
        train_metrics: int = ...,
        dropout: Optional[bool] = ...,
        recompute_modules: Optional[Sequence[str]] = ...,
        rules: Optional[str] = ...,
    ) -> "Model": ...

@final
class Strategy:
    """A strategy file or knob string, and knobs that override it."""

    def __new__(
        cls,
        text: Optional[str] = ...,
        *,
        dp: Optional[int] = ...,
        tp: Optional[int] = ...,
        pp: Optional[int] = ...,
        ep: Optional[int] = ...,
        cp: Optional[int] = ...,
        micro_batch_size: Optional[int] = ...,
        microbatches: Optional[int] = ...,
        schedule: Optional[str] = ...,
        chunks: Optional[int] = ...,
        sequence_parallel: bool = ...,
        recompute: Optional[str] = ...,
        zero: Optional[int] = ...,
        precision: Optional[str] = ...,
        tp_comm_overlap: bool = ...,
        overlap_param_gather: bool = ...,
        no_overlap_grad_reduce: bool = ...,
        fp8_params: bool = ...,
        fp8_dispatch: bool = ...,
        node_dispatch: bool = ...,
    ) -> "Strategy": ...

@final
class Machine:
    """A calibration table with its what-if edits, stack profile, devices per node and memory
    per device. ``stack``: ``"none"`` (the default) profile-free, ``"auto"`` each strategy on
    the shipped profile of the software stack it is assumed to run on, a profile's name or file
    that profile for every strategy."""

    def __new__(
        cls,
        calib: Optional[str] = ...,
        *,
        what_if: Optional[str] = ...,
        stack: Optional[str] = ...,
        gpus_per_node: Optional[int] = ...,
        memory: Union[int, str, None] = ...,
        headroom: Union[int, str, None] = ...,
    ) -> "Machine": ...
    @property
    def calibration(self) -> str: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def memory(self) -> _Exact: ...
    @property
    def usable_memory(self) -> _Exact: ...

@final
class Memory:
    """Memory per device, in bytes."""

    @property
    def params(self) -> _Exact: ...
    @property
    def grads(self) -> _Exact: ...
    @property
    def optimizer(self) -> _Exact: ...
    @property
    def activations(self) -> _Exact: ...
    @property
    def total(self) -> _Exact: ...

@final
class Collective:
    """One collective the busiest device runs."""

    @property
    def collective(self) -> str: ...
    @property
    def axis(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def bytes(self) -> _Exact: ...
    @property
    def count(self) -> int: ...
    @property
    def op(self) -> str: ...
    @property
    def tensor(self) -> str: ...

@final
class Stage:
    """One pipeline stage."""

    @property
    def stage(self) -> int: ...
    @property
    def items(self) -> List[Tuple[str, int]]: ...
    @property
    def flops(self) -> _Exact: ...
    @property
    def hbm_cost(self) -> _Exact: ...
    @property
    def kernel_cost(self) -> _Exact: ...
    @property
    def memory(self) -> Memory: ...

@final
class DeviceCost:
    """The busiest device's cost under a strategy."""

    @property
    def strategy(self) -> str: ...
    @property
    def flops(self) -> _Exact: ...
    @property
    def comm(self) -> List[Collective]: ...
    @property
    def p2p_bytes(self) -> _Exact: ...
    @property
    def grad_sum_bytes(self) -> _Exact: ...
    @property
    def memory(self) -> Memory: ...
    @property
    def feasible(self) -> bool: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def stages(self) -> List[Stage]: ...
    @property
    def per_op(self) -> Optional[List[Dict[str, Any]]]: ...

@final
class Cost:
    """What ``cost`` finds; ``raw`` is ``symshard cost --format json``'s document."""

    @property
    def model(self) -> str: ...
    @property
    def assumed_sizes(self) -> Dict[str, _Exact]: ...
    @property
    def overrides(self) -> Dict[str, _Exact]: ...
    @property
    def settings(self) -> Dict[str, str]: ...
    @property
    def symbols(self) -> Dict[str, _Exact]: ...
    @property
    def params(self) -> _Amount: ...
    @property
    def flops(self) -> Dict[str, Dict[str, _Amount]]: ...
    @property
    def activations(self) -> _Amount: ...
    @property
    def per_op(self) -> Optional[List[Dict[str, Any]]]: ...
    @property
    def per_device(self) -> Optional[DeviceCost]: ...
    @property
    def warnings(self) -> List[str]: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

@final
class Timeline:
    """One training step simulated; ``raw`` is ``symshard timeline --format json``'s
    document."""

    @property
    def model(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def settings(self) -> Dict[str, str]: ...
    @property
    def calibration(self) -> str: ...
    @property
    def what_if(self) -> Optional[str]: ...
    @property
    def stack_profile(self) -> Optional[str]: ...
    @property
    def device_count(self) -> int: ...
    @property
    def iteration_seconds(self) -> float: ...
    @property
    def samples_per_second(self) -> float: ...
    @property
    def tokens_per_second(self) -> float: ...
    @property
    def model_tflops_per_device(self) -> float: ...
    @property
    def mfu(self) -> float: ...
    @property
    def bubble_fraction(self) -> float: ...
    @property
    def slowest_device_pace(self) -> float: ...
    @property
    def memory_limit(self) -> float: ...
    @property
    def fits(self) -> Optional[bool]: ...
    @property
    def memory_per_device(self) -> Optional[float]: ...
    @property
    def representative(self) -> str: ...
    @property
    def devices(self) -> List[Dict[str, Any]]: ...
    @property
    def svg(self) -> Optional[str]: ...
    @property
    def warnings(self) -> List[str]: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

def cost(
    model: Model,
    *,
    strategy: Optional[Strategy] = ...,
    machine: Optional[Machine] = ...,
    symbolic: bool = ...,
    per_op: bool = ...,
) -> Cost:
    """Parameters, FLOPs and activation memory; with ``strategy`` the busiest device's share."""

def timeline(model: Model, strategy: Strategy, machine: Machine, *, svg: bool = ...) -> Timeline:
    """One training step of ``strategy`` simulated on ``machine``."""

@final
class SweepRun:
    """A sweep being run: its grid, the rows finished so far (a journal beside the output is
    resumed from) and the files it writes."""

    def __new__(cls, spec: str, output: str) -> SweepRun: ...
    @property
    def points(self) -> int: ...
    @property
    def resumed(self) -> int: ...
    def pending(self) -> List[int]: ...
    def run_local(self, jobs: Optional[int] = None) -> None: ...
    def record(self, rows: List[str]) -> None: ...
    def finish(self) -> SweepResult: ...

@final
class SweepResult:
    """What a finished sweep wrote and found."""

    @property
    def output(self) -> str: ...
    @property
    def csv(self) -> str: ...
    @property
    def journal(self) -> str: ...
    @property
    def points(self) -> int: ...
    @property
    def resumed(self) -> int: ...
    @property
    def infeasible(self) -> int: ...
    @property
    def crossovers(self) -> List[str]: ...
    @property
    def rows(self) -> SweepRows: ...

@final
class SweepRows:
    """A finished sweep's rows, where they are: in its journal, read when asked for (a byte offset
    per point is all that is held)."""

    def __len__(self) -> int: ...
    def row(self, point: int) -> Dict[str, Any]:
        """The row of point ``point``, as a dict of the Parquet file's columns."""
    def chunk(self, start: int, stop: int) -> List[Dict[str, Any]]:
        """The rows of points ``start..stop``, in point order."""

def sweep_points(spec: str, indices: Sequence[int], *, jobs: int = 1) -> List[str]:
    """The rows of the points numbered ``indices`` of the spec at ``spec``, evaluated on ``jobs``
    threads of this process, as the journal's lines, in the order asked."""

@final
class RelativeCost:
    """The relative cost of a ranked row and its parts, in FLOP-equivalents."""

    @property
    def compute(self) -> _Exact: ...
    @property
    def kernels(self) -> _Exact: ...
    @property
    def comm_intra(self) -> _Exact: ...
    @property
    def comm_inter(self) -> _Exact: ...
    @property
    def bubble(self) -> _Exact: ...
    @property
    def hidden(self) -> _Exact: ...
    @property
    def flop_part(self) -> _Exact: ...
    @property
    def byte_part(self) -> _Exact: ...
    @property
    def total(self) -> _Exact: ...

@final
class RankRow:
    """One ranked strategy; ``knobs`` is the row as a :class:`Strategy`."""

    @property
    def rank(self) -> int: ...
    @property
    def dp(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def micro_batch_size(self) -> Optional[int]: ...
    @property
    def microbatches(self) -> int: ...
    @property
    def schedule(self) -> str: ...
    @property
    def chunks(self) -> int: ...
    @property
    def sequence_parallel(self) -> bool: ...
    @property
    def recompute(self) -> str: ...
    @property
    def zero(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def overlap(self) -> Dict[str, bool]: ...
    @property
    def precision(self) -> str: ...
    @property
    def fp8_params(self) -> bool: ...
    @property
    def fp8_dispatch(self) -> bool: ...
    @property
    def node_dispatch(self) -> bool: ...
    @property
    def relative_cost(self) -> _Exact: ...
    @property
    def relative(self) -> RelativeCost: ...
    @property
    def memory_per_device(self) -> _Exact: ...
    @property
    def memory(self) -> Memory: ...
    @property
    def feasible(self) -> bool: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def iteration_seconds(self) -> Optional[float]: ...
    @property
    def knobs_that_do_not_matter(self) -> Dict[str, List[str]]: ...
    @property
    def strategy(self) -> str: ...
    @property
    def stack(self) -> str: ...
    @property
    def tie(self) -> Optional[str]: ...
    @property
    def layout(self) -> str: ...
    @property
    def placements(self) -> Optional[Dict[str, str]]: ...
    @property
    def knobs(self) -> Strategy: ...

@final
class PartialDomains:
    """The best strategy on part of each NVLink domain, where the machine's domain is not a
    power of two (64 of each 72-GPU GB200 NVL72 rack), against #1 on full domains."""

    @property
    def domain_size(self) -> int: ...
    @property
    def gpus_per_domain(self) -> int: ...
    @property
    def domains(self) -> int: ...
    @property
    def full_domains(self) -> int: ...
    @property
    def best(self) -> RankRow: ...
    @property
    def wins(self) -> bool: ...
    @property
    def change(self) -> Optional[float]: ...
    @property
    def straddling(self) -> List[str]: ...

@final
class Ranking:
    """What ``rank`` finds; ``raw`` is ``symshard rank --format json``'s document and
    ``warnings`` what the command line prints to stderr."""

    @property
    def model(self) -> str: ...
    @property
    def devices(self) -> int: ...
    @property
    def gpus_per_node(self) -> int: ...
    @property
    def calibration(self) -> str: ...
    @property
    def stack_profile(self) -> Optional[str]: ...
    @property
    def stack_supports(self) -> Optional[str]: ...
    @property
    def memory_limit(self) -> _Exact: ...
    @property
    def by_seconds(self) -> bool: ...
    @property
    def rows(self) -> List[RankRow]: ...
    @property
    def pareto(self) -> List[RankRow]: ...
    @property
    def nothing_fits(self) -> Optional[str]: ...
    @property
    def evaluated(self) -> int: ...
    @property
    def feasible(self) -> int: ...
    @property
    def rejected(self) -> Dict[str, int]: ...
    @property
    def rejected_by_kind(self) -> Dict[str, Tuple[int, str]]: ...
    @property
    def simulated(self) -> int: ...
    @property
    def balance_range(self) -> Optional[Tuple[_Exact, Optional[_Exact]]]: ...
    @property
    def search_seconds(self) -> float: ...
    @property
    def partial_domains(self) -> Optional[PartialDomains]: ...
    @property
    def borrowed_curves(self) -> List[str]: ...
    @property
    def warnings(self) -> List[str]: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

def rank(
    model: Model,
    devices: int,
    *,
    machine: Optional[Machine] = ...,
    by_seconds: Optional[bool] = ...,
    top: int = ...,
    fix: Optional[str] = ...,
    max: Optional[str] = ...,
    no_sp: bool = ...,
    headroom: Union[int, str, None] = ...,
    max_microbatches: Optional[int] = ...,
    max_chunks: Optional[int] = ...,
    layouts: Optional[str] = ...,
    pareto: bool = ...,
    emit: Optional[str] = ...,
    why: bool = ...,
) -> Ranking:
    """The strategies of ``model`` on ``devices`` devices, ranked."""

@final
class Component:
    """One row of a comparison: A's value, B's and B − A, exact, with formulas where they
    exist."""

    @property
    def group(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def a(self) -> _Exact: ...
    @property
    def b(self) -> _Exact: ...
    @property
    def difference(self) -> _Exact: ...
    @property
    def formula_a(self) -> Optional[str]: ...
    @property
    def formula_b(self) -> Optional[str]: ...
    @property
    def formula_difference(self) -> Optional[str]: ...

@final
class Comparison:
    """Two strategies side by side; ``raw`` is ``symshard compare --format json``'s document."""

    @property
    def model(self) -> str: ...
    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...
    @property
    def components(self) -> List[Component]: ...
    @property
    def cheaper(self) -> str: ...
    @property
    def wins_on(self) -> List[Tuple[str, _Exact]]: ...
    @property
    def loses_on(self) -> List[Tuple[str, _Exact]]: ...
    @property
    def warnings(self) -> List[str]: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

def compare(
    model: Model,
    a: str,
    b: str,
    *,
    machine: Optional[Machine] = ...,
    seconds: bool = ...,
    plateau: bool = ...,
) -> Comparison:
    """Strategies ``a`` and ``b`` (strategy files or knob strings) side by side."""

@final
class Crossover:
    """Where strategy A stops beating strategy B as one symbol grows; ``raw`` is
    ``symshard crossover --format json``'s document."""

    @property
    def model(self) -> str: ...
    @property
    def symbol(self) -> str: ...
    @property
    def start(self) -> _Exact: ...
    @property
    def stop(self) -> _Exact: ...
    @property
    def step(self) -> _Exact: ...
    @property
    def step_reason(self) -> str: ...
    @property
    def a(self) -> str: ...
    @property
    def b(self) -> str: ...
    @property
    def calibration(self) -> str: ...
    @property
    def intervals(self) -> List[Tuple[_Exact, _Exact, str]]: ...
    @property
    def boundaries(self) -> List[Tuple[_Exact, _Exact, _Exact]]: ...
    @property
    def piecewise(self) -> bool: ...
    @property
    def raw(self) -> Dict[str, Any]: ...

def crossover(
    model: Model,
    a: str,
    b: str,
    symbol: str,
    *,
    start: Optional[int] = ...,
    stop: Optional[int] = ...,
    step: Optional[int] = ...,
    machine: Optional[Machine] = ...,
) -> Crossover:
    """Where strategy ``a`` stops beating strategy ``b`` as ``symbol`` grows."""

def models() -> List[Tuple[str, Optional[str], str, Optional[int], str]]:
    """The models a name resolves to: ``(name, family, source, params, doc)`` each."""

def machines() -> List[
    Tuple[str, str, Dict[str, _Exact], _Exact, _Exact, int, _Exact, _Exact, str, str]
]:
    """The shipped machines: ``(name, device, peak_flops, memory_bandwidth, memory_capacity,
    gpus_per_node, intra_bandwidth, inter_bandwidth, inter_algorithm, doc)`` each."""

def machine_sources(name: str) -> List[Tuple[str, str, str]]:
    """Every number of a machine's table: ``(path, value, source)`` each."""

def explain(
    rule: str, *, rules: Optional[str] = ..., dtype_bytes: int = ...
) -> Tuple[Dict[str, Any], List[str]]:
    """An operator rule explained: ``symshard explain --format json``'s document and the notes."""

def report(
    model: Model,
    name: str,
    devices: int,
    output: str,
    command: str,
    *,
    machine: Optional[Machine] = ...,
    by_seconds: Optional[bool] = ...,
    top: int = ...,
    fix: Optional[str] = ...,
    max: Optional[str] = ...,
    no_sp: bool = ...,
    headroom: Union[int, str, None] = ...,
    max_microbatches: Optional[int] = ...,
    max_chunks: Optional[int] = ...,
    layouts: Optional[str] = ...,
) -> Tuple[int, List[str]]:
    """Write ``symshard report``'s HTML file; the bytes written and the warnings."""
