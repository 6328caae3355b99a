//! [`MachineRef`]: a calibration table, devices per node and the memory a strategy may fill on
//! one device, passed together to everything that prices or times a strategy.

use super::Calibration;
use crate::sym::Rational;

/// The machine one strategy is priced and timed on, borrowed: the calibration table (with its
/// what-if edits and stack profile), the devices per node (given, or the table's), and the bytes
/// a strategy may fill on one device (the memory less any headroom;
/// [`crate::api::Machine::usable_memory`]). The owning, checked form is [`crate::api::Machine`].
#[derive(Debug, Clone, Copy)]
pub struct MachineRef<'a> {
    /// The calibration table.
    pub calib: &'a Calibration,
    /// Bytes a strategy may fill on one device.
    pub memory: &'a Rational,
    /// Devices per node where given (a strategy or a caller fixed them); else the table's.
    nodes: Option<u64>,
}

impl<'a> MachineRef<'a> {
    /// `calib` with `gpus_per_node` devices per node and `memory` bytes usable on each.
    pub fn new(calib: &'a Calibration, gpus_per_node: u64, memory: &'a Rational) -> Self {
        MachineRef::of(calib, memory).nodes_of(Some(gpus_per_node))
    }

    /// `calib` with its own devices per node and `memory` bytes usable on each.
    pub fn of(calib: &'a Calibration, memory: &'a Rational) -> Self {
        MachineRef {
            calib,
            memory,
            nodes: None,
        }
    }

    /// `calib` as its table states it: its own devices per node, and the whole memory capacity
    /// of a device usable (no headroom kept).
    pub fn whole(calib: &'a Calibration) -> Self {
        MachineRef::of(calib, &calib.device.memory_capacity.value)
    }

    /// The same machine with `gpus_per_node` devices per node where given (a strategy that
    /// fixes its node size), else as it is.
    pub fn nodes_of(self, gpus_per_node: Option<u64>) -> Self {
        MachineRef {
            nodes: gpus_per_node.or(self.nodes),
            ..self
        }
    }

    /// The same devices per node and memory on another table (`compare --plateau` prices on
    /// the table at the matmul plateau).
    pub fn on(self, calib: &'a Calibration) -> Self {
        MachineRef { calib, ..self }
    }

    /// Devices per node: as given, else the table's.
    pub fn gpus_per_node(&self) -> u64 {
        self.nodes.unwrap_or_else(|| self.calib.gpus_per_node())
    }

    /// Devices per node where given; a timing plan records them (a plan timed on another table
    /// takes that table's otherwise).
    pub fn given_gpus_per_node(&self) -> Option<u64> {
        self.nodes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_per_node_are_the_tables_until_given() {
        let calib = Calibration::reference().unwrap();
        let memory = calib.memory_bytes();
        let table = calib.gpus_per_node();
        let of = MachineRef::of(&calib, &memory);
        let whole = MachineRef::whole(&calib);
        assert_eq!((whole.memory, whole.given_gpus_per_node()), (&memory, None));
        assert_eq!(
            (of.gpus_per_node(), of.given_gpus_per_node()),
            (table, None)
        );
        // A strategy that fixes nothing keeps the table's; one that fixes 4 wins.
        assert_eq!(of.nodes_of(None).given_gpus_per_node(), None);
        let four = of.nodes_of(Some(4));
        assert_eq!(
            (four.gpus_per_node(), four.given_gpus_per_node()),
            (4, Some(4))
        );
        // Given once, a later `None` does not take them back.
        assert_eq!(four.nodes_of(None).gpus_per_node(), 4);
        let new = MachineRef::new(&calib, table, &memory);
        assert_eq!(new.given_gpus_per_node(), Some(table));
        // Another table keeps the devices per node and the memory.
        let plateau = calib.at_plateau();
        let moved = four.on(&plateau);
        assert_eq!((moved.gpus_per_node(), moved.memory), (4, &memory));
    }
}
