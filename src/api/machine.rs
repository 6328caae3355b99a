//! [`Machine`]: the calibration table, devices per node and device memory, together.

use crate::calib::Calibration;
use crate::error::Error;
use crate::sym::Rational;

/// The default headroom as a header names it.
pub(crate) fn default_headroom_text() -> String {
    format!(
        "{} by default, --headroom to change",
        crate::calib::DEFAULT_HEADROOM
    )
}

/// The machine a strategy is priced and timed on: a calibration table (with any what-if edits
/// and stack profile), the devices per node and the memory of one device.
#[derive(Debug, Clone)]
pub struct Machine {
    calibration: Calibration,
    gpus_per_node: Option<u64>,
    memory: Option<Rational>,
    headroom: Option<super::Headroom>,
    spelling: super::Spelling,
}

impl Machine {
    /// The embedded reference machine, profile-free ([`Machine::with_stack`]).
    pub fn reference() -> Result<Machine, Error> {
        Ok(Machine::from_calibration(Calibration::resolve_with(
            None, None,
        )?))
    }

    /// A shipped table's name or a table file (`TABLE@KERNEL` times fused attention with one of
    /// the table's `attention_kernels`), profile-free ([`Machine::with_stack`]).
    pub fn named(table: &str) -> Result<Machine, Error> {
        Ok(Machine::from_calibration(Calibration::resolve_with(
            Some(table),
            None,
        )?))
    }

    /// A table already loaded, with the stack profiles it carries.
    pub fn from_calibration(calibration: Calibration) -> Machine {
        Machine {
            calibration,
            gpus_per_node: None,
            memory: None,
            headroom: None,
            spelling: super::Spelling::default(),
        }
    }

    /// The machine with its refusals naming options as `spelling`'s caller writes them
    /// (`--with`, `--gpus-per-node` on the command line, by default; `what_if`,
    /// `gpus_per_node` in Python).
    pub fn spelled(mut self, spelling: super::Spelling) -> Machine {
        self.spelling = spelling;
        self
    }

    /// The machine with named quantities of its table changed (`nvlink.bandwidth=x2,domain=72`;
    /// a factor `xF` or a value with its unit).
    pub fn with_what_if(self, edits: &str) -> Result<Machine, Error> {
        Ok(Machine {
            calibration: self
                .calibration
                .with_what_if_as(edits, self.spelling.name(super::OptionName::With))?,
            ..self
        })
    }

    /// The machine with the software stack profiles `stack` names added to the seconds of its
    /// timelines: `auto` each strategy on the shipped profile of the stack it assumes, `none`
    /// none (the default), a file or a shipped profile's name that one for every strategy.
    pub fn with_stack(self, stack: &str) -> Result<Machine, Error> {
        Ok(Machine {
            calibration: self.calibration.with_stack(Some(stack))?,
            ..self
        })
    }

    /// The machine with `n` devices per node (refused unless it is 1 or more).
    pub fn with_gpus_per_node(self, n: u64) -> Result<Machine, Error> {
        crate::strategy::check_gpus_per_node(n).map_err(|e| self.machine_error(e))?;
        Ok(self.with_gpus_per_node_unchecked(n))
    }

    /// [`Machine::with_gpus_per_node`] checked later, when a strategy is resolved on it (the
    /// command line's order of errors).
    pub(crate) fn with_gpus_per_node_unchecked(mut self, n: u64) -> Machine {
        self.gpus_per_node = Some(n);
        self
    }

    /// A refusal of the devices per node, naming the option as the machine's caller writes it
    /// (the strategy's own message says `gpus_per_node`, the strategy file's and Python's name).
    pub(crate) fn machine_error(&self, e: crate::strategy::StrategyError) -> Error {
        match self.spelling {
            super::Spelling::CommandLine => super::machine_error(e),
            super::Spelling::Python => Error::Usage(e.to_string()),
        }
    }

    /// How the machine's caller names options ([`Machine::spelled`]).
    pub(crate) fn spelling(&self) -> super::Spelling {
        self.spelling
    }

    /// The machine with `bytes` of memory per device instead of its table's capacity.
    pub fn with_memory(mut self, bytes: Rational) -> Machine {
        self.memory = Some(bytes);
        self
    }

    /// The machine keeping `headroom` of each device's memory free: a strategy fits when its
    /// fullest device needs no more than the rest ([`Machine::usable_memory`]).
    pub fn with_headroom(mut self, headroom: super::Headroom) -> Machine {
        self.headroom = Some(headroom);
        self
    }

    /// The memory a strategy may fill on one device, the one definition of "fits" for every
    /// command: the memory less the headroom given; without a headroom, a memory given is all
    /// usable and the table's capacity keeps the default headroom
    /// ([`crate::calib::DEFAULT_HEADROOM`]).
    pub fn usable_memory(&self) -> Result<Rational, Error> {
        match (&self.headroom, &self.memory) {
            (Some(h), _) => h.apply(&self.memory(), self.spelling),
            (None, Some(m)) => Ok(m.clone()),
            (None, None) => Ok(self.calibration.usable_memory_bytes()),
        }
    }

    /// The headroom as a header names it: as given, or the default's where the memory is the
    /// table's; `None` where a memory given is all usable.
    pub fn headroom_text(&self) -> Option<String> {
        match (&self.headroom, &self.memory) {
            (Some(h), _) => Some(h.text()),
            (None, Some(_)) => None,
            (None, None) => Some(default_headroom_text()),
        }
    }

    /// Its calibration table.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// Devices per node: as given, else the table's.
    pub fn gpus_per_node(&self) -> u64 {
        self.gpus_per_node
            .unwrap_or_else(|| self.calibration.gpus_per_node())
    }

    /// Devices per node where given explicitly (they win over a strategy file's).
    pub fn given_gpus_per_node(&self) -> Option<u64> {
        self.gpus_per_node
    }

    /// Bytes of memory per device where given explicitly.
    pub fn given_memory(&self) -> Option<&Rational> {
        self.memory.as_ref()
    }

    /// Bytes of memory per device: as given, else the table's capacity.
    pub fn memory(&self) -> Rational {
        self.memory
            .clone()
            .unwrap_or_else(|| self.calibration.memory_bytes())
    }
}
