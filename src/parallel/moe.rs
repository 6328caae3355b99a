//! Expert parallelism for mixture-of-experts layers: the all-to-all traffic of dispatch and
//! combine, and where a model's expert layers and expert weights are.
//!
//! An expert-parallel group of `n` devices shares the experts of each MoE layer, E/n per device
//! (GShard, Lepikhin et al. 2021; DeepSpeed-MoE; Megatron-LM's expert parallelism), and is drawn
//! from the ranks that hold the same dense weights, the dp × cp data- and context-parallel ranks:
//! each device still routes its own tokens (with context parallelism, its S/cp tokens of each
//! sequence).
//!
//! Megatron-Core lays the expert layers over the same devices as the dense ones, re-sliced:
//! `initialize_model_parallel` in megatron/core/parallel_state.py (NVIDIA/Megatron-LM at commit
//! 00caa53af30912914981c86f39db123961678bbd) builds the dense groups with
//! `RankGenerator(tp, ep=1, dp, pp, cp, order="tp-cp-ep-dp-pp")` and the expert groups with
//! `RankGenerator(tp=expert_tp, ep, dp=world // (expert_tp · ep · pp), pp, cp=1, order)`, so
//! with the expert tensor-parallel size left at tp an expert-parallel group is `ep` consecutive
//! ranks at the tensor-parallel stride, taken from the cp × dp ranks (context-parallel ranks
//! first), and the expert-data-parallel group, which reduces the expert gradients, is the
//! dp · cp / ep ranks holding the same experts. Before the experts, a
//! device holds `T` tokens, routed to `k` experts each, into buffers of `C·T·k` slots of `H`
//! elements (capacity factor `C`; 1 is dropless). The dispatch all-to-all sends every slot to the
//! device owning its expert; a device keeps the 1/n of its slots whose experts it owns and sends
//! the rest, (n − 1)/n · C·T·k·H elements, receiving as much (nccl-tests doc/PERFORMANCE.md:
//! all-to-all moves (n − 1)/n · S per rank). The combine all-to-all returns the expert outputs the same way. In the
//! backward pass the gradients take both routes in reverse: four all-to-alls of that size per
//! layer and micro-batch. Expert compute per device is unchanged when the routing is balanced:
//! E/n experts, each receiving n devices' share of slots.

use crate::model::Model;
use crate::rules::law::CollectiveKind;
use crate::rules::Role;
use crate::strategy::StrategyError;
use crate::sym::{Poly, Rational};
use num_traits::{One, Zero};
use serde::Serialize;

/// The expert-parallel axis size symbol.
pub const EP: &str = "p_ep";

/// The share of an operator's weights that one device holds under expert parallelism over
/// `ep` devices: 1/ep of an expert GEMM's (its E/ep experts), all of any other operator's.
pub fn held_share(role: Option<Role>, ep: u64) -> Rational {
    if role == Some(Role::ExpertGemm) {
        Rational::new(1.into(), ep.max(1).into())
    } else {
        Rational::one()
    }
}

/// One mixture-of-experts layer as one device sees it before dispatch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeLayer {
    /// Tokens entering the layer on the device (its share of the micro-batch).
    pub tokens: Poly,
    /// Experts chosen per token (top-k).
    pub top_k: Poly,
    /// Capacity factor: expert slots per routed token (1 for dropless routing).
    pub capacity: Poly,
    /// Elements of one token's row (the hidden size).
    pub hidden: Poly,
}

/// The expert-parallel all-to-all traffic of one MoE layer, per device and micro-batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExpertParallelComm {
    /// Bytes of the slots one device dispatches: the all-to-all's logical tensor, T·k·C·H·bytes.
    pub slot_bytes: Poly,
    /// Wire bytes per rank of one all-to-all, (n − 1)/n of the slots.
    pub per_call: Poly,
    /// Forward: dispatch and combine, two calls.
    pub forward: Poly,
    /// Backward: the gradients of combine and dispatch, two calls.
    pub backward: Poly,
    /// Forward and backward together.
    pub total: Poly,
    /// All-to-all calls per micro-batch, forward and backward together.
    pub calls: u32,
}

/// The all-to-all traffic of `layer` over an expert-parallel group of `ep` devices (a number or
/// a symbol such as [`EP`]) for elements of `dtype_bytes` bytes. `ep` must be a non-zero monomial.
pub fn expert_parallel_comm(
    ep: &Poly,
    layer: &MoeLayer,
    dtype_bytes: u32,
) -> Result<ExpertParallelComm, StrategyError> {
    if ep.is_zero() || !ep.is_monomial() {
        return Err(StrategyError::EpNotMonomial { ep: ep.clone() });
    }
    let slot_bytes = &layer.tokens
        * &layer.top_k
        * &layer.capacity
        * &layer.hidden
        * Poly::int(i64::from(dtype_bytes));
    let per_call = CollectiveKind::AllToAll.wire_bytes(&slot_bytes, ep);
    let forward = Poly::int(2) * &per_call;
    let backward = Poly::int(2) * &per_call;
    Ok(ExpertParallelComm {
        total: &forward + &backward,
        slot_bytes,
        per_call,
        forward,
        backward,
        calls: 4,
    })
}

/// Bytes per slot element of an FP8 dispatch, relative to the 2 bytes of the bf16 activation
/// it replaces: 1 byte of E4M3 and a 4-byte fp32 scale per 1×128 tile (DeepSeek-V3,
/// arXiv:2412.19437, §3.3.2 and its fine-grained 1×128 activation tiles, §3.3.1; DeepEP,
/// github.com/deepseek-ai/DeepEP, README: the dispatch takes FP8 tokens with their scales, the
/// combine BF16 ones): (1 + 4/128)/2 = 33/64.
pub const FP8_DISPATCH_SHARE: (u64, u64) = (33, 64);

/// Wire bytes per rank of each of the four expert-parallel all-to-alls of one MoE layer and
/// micro-batch, from the bytes of the slots a device dispatches (`slot_bytes`, bf16): the
/// forward's dispatch and combine, then the backward's combine gradient and dispatch gradient.
/// Each moves `share` of the slots over the expert-parallel links ([`wire_share`]: (ep − 1)/ep
/// for the flat all-to-all, nccl-tests doc/PERFORMANCE.md: all-to-all moves (n − 1)/n · S per
/// rank). A share other than that one is node-limited dispatch's, which depends on the model's
/// routing sizes through binomials, no polynomial in them: the wire then has no formula. With
/// FP8 dispatch ([`crate::strategy::Knobs::fp8_dispatch`]) the two toward the experts, the
/// dispatch and the combine gradient (the activation gradient before the down-projections),
/// move [`FP8_DISPATCH_SHARE`] of that; the two back stay bf16.
pub fn all_to_all_wire<T: crate::parallel::amount::Amount>(
    slot_bytes: T,
    k: &crate::strategy::Knobs,
    share: &Rational,
) -> [T; 4] {
    let ep = k.ep.max(1);
    let flat = *share == Rational::new((ep - 1).into(), ep.into());
    let share = if flat {
        T::exact(share)
    } else {
        T::opaque(share)
    };
    let bf16 = share * slot_bytes;
    let toward = if k.fp8_dispatch {
        let (num, den) = FP8_DISPATCH_SHARE;
        bf16.clone() * T::ratio(num, den)
    } else {
        bf16.clone()
    };
    [toward.clone(), bf16.clone(), toward, bf16]
}

/// The share of a device's expert slots one all-to-all of strategy `k` puts on the
/// expert-parallel links: (ep − 1)/ep for the flat all-to-all (every slot whose expert is on
/// another rank); under node-limited dispatch ([`crate::strategy::Knobs::node_dispatch`]) where
/// a group spans `nodes` nodes, the inter-node share of [`NodeRoute`] for the model's
/// `routing` (a model whose routing is unknown, no `experts` or `top_k` role, is priced flat).
pub fn wire_share(k: &crate::strategy::Knobs, routing: Option<&Routing>, nodes: u64) -> Rational {
    match node_route(k, routing, nodes) {
        Some(r) => r.inter,
        None => Rational::new((k.ep.max(1) - 1).into(), k.ep.max(1).into()),
    }
}

/// The node-limited route of strategy `k` where it applies: node dispatch, a group spanning
/// `nodes` > 1 nodes, and a known `routing`.
pub fn node_route(
    k: &crate::strategy::Knobs,
    routing: Option<&Routing>,
    nodes: u64,
) -> Option<NodeRoute> {
    let r = routing.filter(|_| k.node_dispatch && nodes > 1)?;
    Some(NodeRoute::of(r, k.ep, nodes))
}

/// How a model routes each token to its experts, evaluated: what the node-limited dispatch
/// needs to count the nodes a token reaches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Routing {
    /// Routed experts (the model's `experts` role).
    pub experts: u64,
    /// Experts per token (`top_k`).
    pub top_k: u64,
    /// Group-limited routing (DeepSeek-V2 and V3's `n_group`, `topk_group`): the experts split
    /// into this many groups of consecutive experts, and each token's experts chosen from this
    /// many of them (the `expert_groups` and `groups_per_token` roles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<(u64, u64)>,
}

/// The symbols of a model's routing: its `experts` and `top_k` roles, and its
/// `expert_groups` and `groups_per_token` roles where it declares both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingSymbols {
    experts: String,
    top_k: String,
    groups: Option<(String, String)>,
}

impl RoutingSymbols {
    /// Those of `model`, where it has the `experts` and `top_k` roles.
    pub fn of(model: &Model) -> Option<RoutingSymbols> {
        let r = &model.roles;
        Some(RoutingSymbols {
            experts: r.experts.clone()?,
            top_k: r.top_k.clone()?,
            groups: r.expert_groups.clone().zip(r.groups_per_token.clone()),
        })
    }

    /// The routing at `values`, where the experts and top-k are bound to positive whole
    /// numbers; its groups where both group symbols are.
    pub fn at(&self, values: &crate::sym::Bindings) -> Option<Routing> {
        let whole = |s: &str| -> Option<u64> {
            let v = values.get(s)?;
            v.is_integer()
                .then(|| v.to_integer().try_into().ok())
                .flatten()
                .filter(|n: &u64| *n > 0)
        };
        Some(Routing {
            experts: whole(&self.experts)?,
            top_k: whole(&self.top_k)?,
            groups: self
                .groups
                .as_ref()
                .and_then(|(g, kept)| whole(g).zip(whole(kept))),
        })
    }
}

/// An expert-parallel group's dispatch node by node (DeepSeek-V3, arXiv:2412.19437, §3.2.2; its
/// node-limited routing, §2.1.2; DeepEP's internode kernels): each token is sent once over the
/// inter-node links to every other node holding any of its experts (to the device with the same
/// in-node index), and fanned out there over the node's links to the devices of its experts,
/// the two overlapped.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRoute {
    /// Share of a device's slots one all-to-all sends between nodes: a token's row once per
    /// other node it reaches, `reached · (nodes − 1)/nodes` rows of its `top_k` slots, where
    /// `reached` is the expected number of nodes its experts are on ([`nodes_reached`]).
    pub inter: Rational,
    /// Share of a device's slots one all-to-all moves inside nodes: every slot whose expert is
    /// on another device of the node it reaches, `(per_node − 1)/per_node`.
    pub intra: Rational,
}

impl NodeRoute {
    /// The route of `routing` over an expert-parallel group of `ep` ranks spread evenly over
    /// `nodes` nodes (`ep / nodes` in each, holding consecutive experts, as Megatron-Core and
    /// DeepEP place them).
    pub fn of(routing: &Routing, ep: u64, nodes: u64) -> NodeRoute {
        let nodes = nodes.clamp(1, ep.max(1));
        let per_node = (ep / nodes).max(1);
        let reached = nodes_reached(routing, nodes);
        let r = |n: u64| Rational::from_integer(n.into());
        NodeRoute {
            inter: reached * r(nodes - 1) / r(nodes) / r(routing.top_k.max(1)),
            intra: r(per_node - 1) / r(per_node),
        }
    }
}

/// The expected number of the `nodes` nodes that a token's experts are on, under balanced
/// routing (each choice equally likely, as the rest of the expert-parallel pricing assumes).
/// The experts sit in equal runs of consecutive experts per node. Without group-limited
/// routing, the `top_k` experts are any of the `experts`: `nodes · (1 − C(E − E/nodes, k) /
/// C(E, k))`. With it, where each node holds whole groups (`n_group` a multiple of `nodes`) and
/// a token takes at least one expert from each group it keeps (`topk_group ≤ top_k`), its
/// experts are on the nodes of its `topk_group` groups: the same count over groups,
/// `nodes · (1 − C(G − G/nodes, g) / C(G, g))`. DeepSeek-V3's 8 groups of 32 experts on 8 nodes
/// of EP64, 4 groups kept, give exactly 4: the report's "at most 4 nodes" (§2.1.2). Where the
/// experts do not sit evenly on the nodes either, at most `min(nodes, top_k)`, which is taken.
pub fn nodes_reached(routing: &Routing, nodes: u64) -> Rational {
    let spread = |items: u64, picks: u64| -> Option<Rational> {
        if nodes <= 1 || items == 0 || !items.is_multiple_of(nodes) || picks > items {
            return None;
        }
        let missed = choose(items - items / nodes, picks) / choose(items, picks);
        Some(Rational::from_integer(nodes.into()) * (Rational::one() - missed))
    };
    if nodes <= 1 {
        return Rational::one();
    }
    let grouped = routing
        .groups
        .filter(|&(g, kept)| kept <= routing.top_k && g.is_multiple_of(nodes))
        .and_then(|(g, kept)| spread(g, kept));
    grouped
        .or_else(|| spread(routing.experts, routing.top_k))
        .unwrap_or_else(|| Rational::from_integer(nodes.min(routing.top_k).into()))
}

/// C(n, r), exactly.
fn choose(n: u64, r: u64) -> Rational {
    if r > n {
        return Rational::zero();
    }
    let r = r.min(n - r);
    (0..r).fold(Rational::one(), |acc, i| {
        acc * Rational::new((n - i).into(), (i + 1).into())
    })
}

/// A mixture-of-experts layer of a model: its dispatch operator and what it moves.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MoeSite {
    /// The block it is in.
    pub block: String,
    /// The `moe_dispatch` operator.
    pub op: String,
    /// Copies of the block.
    pub repeat: Poly,
    /// Experts of the layer (the dispatch's expert index).
    pub experts: Poly,
    /// Slot elements of the whole micro-batch, g·e·c·h of the dispatch (tokens × k × C × hidden).
    pub slot_elements: Poly,
    /// Parameter elements of the block's per-expert weights (`expert_matmul`), all experts.
    pub expert_params: Poly,
}

/// The mixture-of-experts layers of `model`, one per `moe_dispatch` operator.
pub fn moe_sites(model: &Model) -> Vec<MoeSite> {
    let mut out = Vec::new();
    for block in &model.blocks {
        let expert_params: Poly = block
            .ops()
            .filter(|o| o.rule.is(Role::ExpertGemm))
            .map(|o| {
                (0..o.rule.inputs.len())
                    .filter(|&k| o.owns_param(k))
                    .map(|k| o.elements(&o.rule.inputs[k]))
                    .sum::<Poly>()
            })
            .sum();
        for op in block.ops().filter(|o| o.rule.is(Role::MoeDispatch)) {
            let y = &op.rule.output;
            out.push(MoeSite {
                block: block.name.clone(),
                op: op.name.clone(),
                repeat: block.repeat.clone(),
                experts: op.bind.get("e").cloned().unwrap_or_else(Poly::one),
                slot_elements: op.elements(y),
                expert_params: expert_params.clone(),
            });
        }
    }
    out
}

/// The per-device all-to-all traffic of one micro-batch through `site`, data parallelism over
/// `dp` devices splitting its tokens and expert parallelism over `ep` (symbols or numbers).
pub fn site_comm(
    site: &MoeSite,
    dp: &Poly,
    ep: &Poly,
    dtype_bytes: u32,
) -> Result<ExpertParallelComm, StrategyError> {
    let slots = site
        .slot_elements
        .checked_div(dp)
        .map_err(|source| StrategyError::DpDegree {
            dp: dp.clone(),
            source,
        })?;
    // The slot count already includes k and C: pass it as tokens with k = C = 1.
    let layer = MoeLayer {
        tokens: slots,
        top_k: Poly::one(),
        capacity: Poly::one(),
        hidden: Poly::one(),
    };
    expert_parallel_comm(ep, &layer, dtype_bytes)
}

/// The gradient all-reduce of expert weights under expert parallelism, from its bytes without
/// it. Without expert parallelism the `dp · cp` ranks holding the same weights (the data-parallel
/// ranks of every context-parallel rank) each hold the gradients of all E experts, S bytes, and
/// the all-reduce moves 2·(1 − 1/R)·S per rank, R = dp · cp. With expert parallelism over `ep` of
/// them, a rank holds the gradients of E/ep experts, S/ep bytes, shared by the R/ep ranks that
/// hold the same experts (Megatron-Core's expert-data-parallel group):
/// 2·(1 − ep/R)·S/ep = dp_bytes·(R − ep)/(ep·(R − 1)). At cp = 1 this is the data-parallel
/// formula, R = dp.
pub fn expert_grad_allreduce<T: crate::parallel::amount::Amount>(
    dp_bytes: &T,
    dp: u64,
    cp: u64,
    ep: u64,
) -> Result<T, StrategyError> {
    let replicas = dp * cp;
    if ep == 0 || replicas == 0 || !replicas.is_multiple_of(ep) {
        return Err(StrategyError::EpDividesDp { ep, dp, cp });
    }
    if replicas == 1 {
        return Ok(dp_bytes.clone());
    }
    Ok(dp_bytes.clone() * T::int(replicas - ep) / T::int(ep * (replicas - 1)))
}

/// Checks an expert-parallel degree against a model and the data- and context-parallel degrees:
/// it divides dp × cp (expert-parallel groups are drawn from those ranks) and every layer's
/// experts.
pub fn check_expert_parallel(
    model: &Model,
    values: &crate::sym::Bindings,
    dp: u64,
    cp: u64,
    ep: u64,
) -> Result<(), StrategyError> {
    if ep == 0 || !(dp * cp).is_multiple_of(ep) {
        return Err(StrategyError::EpDividesDp { ep, dp, cp });
    }
    let sites = moe_sites(model);
    if ep > 1 && sites.is_empty() {
        return Err(StrategyError::EpNoExperts {
            ep,
            model: model.name.clone(),
        });
    }
    for s in &sites {
        let e = s.experts.eval(values)?;
        let per = &e / Rational::from_integer(ep.into());
        if !per.is_integer() {
            return Err(StrategyError::EpExperts {
                ep,
                experts: e,
                op: s.op.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelLoader;
    use crate::sym::Bindings;

    fn p(s: &str) -> Poly {
        Poly::parse(s).unwrap()
    }

    /// Every `picks`-subset of `0..items`, by enumeration.
    fn subsets(items: u64, picks: u64) -> Vec<Vec<u64>> {
        (0u64..1 << items)
            .filter(|m| m.count_ones() as u64 == picks)
            .map(|m| (0..items).filter(|i| m >> i & 1 == 1).collect())
            .collect()
    }

    /// The mean of `count` over `sets`, exactly.
    fn mean(sets: &[Vec<u64>], count: impl Fn(&[u64]) -> u64) -> Rational {
        let total: u64 = sets.iter().map(|s| count(s)).sum();
        Rational::new(total.into(), (sets.len() as u64).into())
    }

    fn distinct(v: impl Iterator<Item = u64>) -> u64 {
        v.collect::<std::collections::BTreeSet<_>>().len() as u64
    }

    /// Without groups: the mean over every choice of top-k experts of the distinct nodes their
    /// experts are on (consecutive experts per node).
    #[test]
    fn the_nodes_a_token_reaches_are_counted_as_by_enumeration() {
        for (experts, top_k, nodes) in [(8, 2, 2), (8, 2, 4), (12, 3, 3), (16, 4, 4), (16, 6, 8)] {
            let per = experts / nodes;
            let want = mean(&subsets(experts, top_k), |s| {
                distinct(s.iter().map(|e| e / per))
            });
            let r = Routing {
                experts,
                top_k,
                groups: None,
            };
            assert_eq!(nodes_reached(&r, nodes), want, "{experts} {top_k} {nodes}");
        }
    }

    proptest::proptest! {
        /// Node by node never puts more of the slots between nodes than the flat all-to-all
        /// puts on the group's links, and reaches at least one node and at most as many as it
        /// has experts or as there are nodes.
        #[test]
        fn node_by_node_never_sends_more_between_nodes_than_the_flat_all_to_all(
            nodes_log in 0u32..6,
            per_node_log in 0u32..4,
            experts_per_rank_log in 0u32..3,
            top_k in 1u64..9,
            groups in proptest::option::of((0u32..4, 1u64..5)),
        ) {
            let (nodes, per_node) = (1u64 << nodes_log, 1u64 << per_node_log);
            let ep = nodes * per_node;
            let experts = ep << experts_per_rank_log;
            let top_k = top_k.min(experts);
            let groups = groups.map(|(g, kept)| {
                let g = (1u64 << g).min(experts);
                (g, kept.min(g))
            });
            let r = Routing { experts, top_k, groups };
            let route = NodeRoute::of(&r, ep, nodes);
            let flat = Rational::new((ep - 1).into(), ep.into());
            proptest::prop_assert!(
                route.inter <= flat,
                "{r:?} over {nodes} nodes: {} > {flat}",
                route.inter
            );
            let reached = nodes_reached(&r, nodes);
            proptest::prop_assert!(reached >= Rational::one());
            let most = nodes.min(top_k);
            proptest::prop_assert!(
                reached <= Rational::from_integer(most.into()),
                "{r:?}: {reached}"
            );
        }
    }

    /// With group-limited routing: a token keeps `kept` of the groups and takes an expert from
    /// each, so its experts are on the nodes of its groups; enumerated over the groups kept.
    #[test]
    fn group_limited_routing_reaches_the_nodes_of_its_groups() {
        for (groups, kept, nodes) in [(8, 4, 8), (8, 3, 4), (12, 2, 3), (8, 4, 2)] {
            let per = groups / nodes;
            let want = mean(&subsets(groups, kept), |s| {
                distinct(s.iter().map(|g| g / per))
            });
            let r = Routing {
                experts: 64,
                top_k: 8,
                groups: Some((groups, kept)),
            };
            assert_eq!(nodes_reached(&r, nodes), want, "{groups} {kept} {nodes}");
        }
        // DeepSeek-V3 at EP64 on 8 nodes (arXiv:2412.19437, §2.1.2 and §3.2.2: "at most 4
        // nodes"; HF config deepseek-ai/DeepSeek-V3: 256 experts, top 8, n_group 8,
        // topk_group 4): its 8 groups are its 8 nodes, so a token reaches exactly 4.
        let v3 = Routing {
            experts: 256,
            top_k: 8,
            groups: Some((8, 4)),
        };
        assert_eq!(nodes_reached(&v3, 8), Rational::from_integer(4.into()));
        // Of which 7/8 are another node's, rows of its 8 slots: 7/16 of the slots cross.
        let route = NodeRoute::of(&v3, 64, 8);
        assert_eq!(route.inter, Rational::new(7.into(), 16.into()));
        assert_eq!(route.intra, Rational::new(7.into(), 8.into()));
        // Groups that do not sit on whole nodes (8 groups on 16 nodes) leave the count to the
        // experts alone.
        let free = Routing {
            groups: None,
            ..v3.clone()
        };
        assert_eq!(nodes_reached(&v3, 16), nodes_reached(&free, 16));
    }

    fn mixtral_layer(tokens: i64) -> MoeLayer {
        MoeLayer {
            tokens: Poly::int(tokens),
            top_k: Poly::int(2),
            capacity: Poly::int(1),
            hidden: Poly::int(4096),
        }
    }

    /// Mixtral 8x7B, 4096 tokens on a device, top-2, dropless, bf16, 8-way expert parallelism.
    /// Slots 4096·2·1 = 8192 rows of 4096 elements of 2 bytes: 67,108,864 bytes; a rank keeps
    /// 1/8 and sends 7/8: 58,720,256 bytes per all-to-all; two forward, two backward.
    #[test]
    fn mixtral_eight_way_by_hand() {
        let c = expert_parallel_comm(&Poly::int(8), &mixtral_layer(4096), 2).unwrap();
        assert_eq!(c.slot_bytes, Poly::int(67_108_864));
        assert_eq!(c.per_call, Poly::int(58_720_256));
        assert_eq!(c.forward, Poly::int(117_440_512));
        assert_eq!(c.backward, Poly::int(117_440_512));
        assert_eq!(c.total, Poly::int(234_881_024));
        assert_eq!(c.calls, 4);
    }

    /// One device owns every expert: nothing moves.
    #[test]
    fn no_expert_parallelism_moves_nothing() {
        let c = expert_parallel_comm(&Poly::int(1), &mixtral_layer(4096), 2).unwrap();
        assert!(c.total.is_zero());
    }

    /// Symbolic: (1 − 1/p_ep)·T·k·C·H·2 per call.
    #[test]
    fn symbolic_formula() {
        let layer = MoeLayer {
            tokens: p("T"),
            top_k: p("K"),
            capacity: p("C"),
            hidden: p("H"),
        };
        let c = expert_parallel_comm(&Poly::symbol(EP), &layer, 2).unwrap();
        assert_eq!(c.per_call, p("2*C*H*K*T - 2*C*H*K*T/p_ep"));
        assert_eq!(c.total, p("8*C*H*K*T - 8*C*H*K*T/p_ep"));
        assert!(expert_parallel_comm(&p("a + b"), &layer, 2).is_err());
        assert!(expert_parallel_comm(&Poly::zero(), &layer, 2).is_err());
    }

    /// A capacity factor of 5/4 pads every buffer by a quarter.
    #[test]
    fn capacity_factor_scales_the_buffers() {
        let mut layer = mixtral_layer(4096);
        layer.capacity = p("5/4");
        let c = expert_parallel_comm(&Poly::int(8), &layer, 2).unwrap();
        assert_eq!(c.per_call, Poly::int(58_720_256 / 4 * 5));
    }

    /// S = 1000 bytes of expert gradients, dp = 8: 2·7/8·1000 = 1750 bytes per rank. With
    /// ep = 4 a rank holds 250 bytes, all-reduced over 2 ranks: 2·1/2·250 = 250 bytes.
    #[test]
    fn expert_gradients_by_hand() {
        let r = |v: i64| Rational::from_integer(v.into());
        assert_eq!(expert_grad_allreduce(&r(1750), 8, 1, 4).unwrap(), r(250));
        assert_eq!(expert_grad_allreduce(&r(1750), 8, 1, 1).unwrap(), r(1750));
        assert_eq!(expert_grad_allreduce(&r(1750), 8, 1, 8).unwrap(), r(0));
        assert_eq!(expert_grad_allreduce(&r(0), 1, 1, 1).unwrap(), r(0));
        assert!(expert_grad_allreduce(&r(1750), 8, 1, 3).is_err());
        // dp = 4, cp = 2: the same 8 ranks hold the dense weights, 2·7/8·1000 = 1750 bytes;
        // ep = 8 (drawn across the context-parallel ranks) leaves each rank alone with its
        // expert, ep = 4 leaves 2 ranks per expert, as at dp = 8.
        assert_eq!(expert_grad_allreduce(&r(1750), 4, 2, 4).unwrap(), r(250));
        assert_eq!(expert_grad_allreduce(&r(1750), 4, 2, 8).unwrap(), r(0));
        assert_eq!(expert_grad_allreduce(&r(1750), 1, 8, 2).unwrap(), r(750));
        assert!(expert_grad_allreduce(&r(1750), 2, 2, 8).is_err());
    }

    #[test]
    fn mixtral_sites_and_checks() {
        let loader = ModelLoader::embedded().unwrap();
        let m = loader.resolve("mixtral-8x7b").unwrap();
        let sites = moe_sites(&m);
        assert_eq!(sites.len(), 1);
        let s = &sites[0];
        assert_eq!((s.block.as_str(), s.op.as_str()), ("layer", "dispatch"));
        assert_eq!(s.repeat, p("L"));
        // g·e·c·h = B·E·(C·S·K/E)·H.
        assert_eq!(s.slot_elements, p("B*C*S*K*H"));
        // w1, w3: E·H·F each; w2: E·F·H.
        assert_eq!(s.expert_params, p("3*E*F*H"));
        // Per device with p_dp data-parallel ranks: the microbatch's slots over p_dp.
        let c = site_comm(s, &Poly::symbol("p_dp"), &Poly::symbol(EP), 2).unwrap();
        assert_eq!(c.per_call, p("2*B*C*S*K*H/p_dp - 2*B*C*S*K*H/(p_dp*p_ep)"));
        let v: &Bindings = &m.values;
        assert!(check_expert_parallel(&m, v, 16, 1, 8).is_ok());
        assert!(check_expert_parallel(&m, v, 2, 4, 8).is_ok());
        assert!(check_expert_parallel(&m, v, 12, 1, 3)
            .unwrap_err()
            .to_string()
            .contains("does not divide the 8 experts"));
        assert!(check_expert_parallel(&m, v, 4, 1, 8)
            .unwrap_err()
            .to_string()
            .contains("must divide dp × cp = 4 × 1"));
        assert!(check_expert_parallel(&m, v, 2, 2, 8)
            .unwrap_err()
            .to_string()
            .contains("must divide dp × cp = 2 × 2"));
        let dense = loader.resolve("llama2-7b").unwrap();
        assert!(moe_sites(&dense).is_empty());
        assert!(check_expert_parallel(&dense, &dense.values, 8, 1, 2).is_err());
        assert!(check_expert_parallel(&dense, &dense.values, 8, 1, 1).is_ok());
    }
}
