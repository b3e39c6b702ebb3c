//! The registry of workloads: one file per workload, plus the shared pieces they
//! are built from (`list.rs`: the five-element lists of the RCU workloads; `arena.rs`: per-thread
//! arenas and the interval-map designs of the `ds-*` workloads and `readers-writers`; `vm.rs`:
//! the address-space designs, `linux` and every `aspace_vm` design, of the VM workloads).
//!
//! [`all`] lists every workload in report order; [`find`] resolves a command-line name.
//! Adding a workload means adding its file and one line in [`all`].

pub mod access;
pub mod access_munmap;
pub mod alloc;
pub mod alloc_fault_modify;
pub mod arena;
pub mod cht;
pub mod ds_alloc;
pub mod ds_map;
pub mod ds_query;
pub mod fault_load;
pub mod file_read;
pub mod global;
pub mod interp;
pub mod limit_counter;
pub mod list;
pub mod local;
pub mod metis;
pub mod mutex;
pub mod pipeline;
pub mod rcu_gp;
pub mod rcu_read;
pub mod rcu_update;
pub mod readers_writers;
pub mod refcount;
pub mod soft_fault;
pub mod vm;

use crate::error::BenchError;
use crate::workload::Workload;

/// Every workload, in report order.
pub fn all() -> Vec<&'static dyn Workload> {
    vec![
        &rcu_read::RcuRead,
        &rcu_update::RcuUpdate,
        &rcu_gp::RcuGp,
        &ds_query::DsQuery,
        &ds_alloc::DsAlloc,
        &ds_map::DsMap,
        &readers_writers::ReadersWriters,
        &limit_counter::LIMIT_COUNTER,
        &limit_counter::LIMIT_COUNTER_NEAR,
        &mutex::Mutex,
        &refcount::Refcount,
        &cht::CHT,
        &cht::CHT_UPDATE10,
        &cht::CHT_READ_HEAVY,
        &cht::CHT_RESIZE,
        &file_read::FileRead,
        &vm::Vm(alloc::Alloc),
        &vm::Vm(alloc_fault_modify::AllocFaultModify),
        &vm::Vm(local::Local),
        &vm::Vm(pipeline::Pipeline),
        &vm::Vm(global::Global),
        &vm::Vm(fault_load::FaultLoad),
        &vm::Vm(fault_load::FaultLoadAt::<0>),
        &vm::Vm(fault_load::FaultLoadAt::<25>),
        &vm::Vm(fault_load::FaultLoadAt::<50>),
        &vm::Vm(fault_load::FaultLoadAt::<100>),
        &vm::Vm(soft_fault::SoftFault),
        &vm::Vm(metis::Metis),
        &vm::Vm(metis::Metis64k),
        &access::ACCESS,
        &access::ACCESS_WIDE,
        &access_munmap::AccessMunmap,
        &interp::Interp,
    ]
}

/// The workloads `name` stands for: `fault-load` without `--mmap-pct` (`pct` `None`) is its
/// four load levels (`fault-load-0pct` ... `fault-load-100pct`, see `fault_load.rs`); any
/// other name is itself.
///
/// # Errors
/// [`BenchError::UnknownWorkload`] as [`find`].
pub fn expand(name: &str, pct: Option<u32>) -> Result<Vec<&'static dyn Workload>, BenchError> {
    if name == FAULT_LOAD && pct.is_none() {
        fault_load::LEVEL_NAMES.iter().map(|n| find(n)).collect()
    } else {
        Ok(vec![find(name)?])
    }
}

/// The name of `fault-load` with a free `--mmap-pct`; the suite runs its levels instead.
pub const FAULT_LOAD: &str = "fault-load";

/// Whether the suite's `--only` entry `only` selects the workload `name` (`fault-load` selects
/// its four load levels).
pub fn selects(only: &str, name: &str) -> bool {
    only == name || (only == FAULT_LOAD && fault_load::LEVEL_NAMES.contains(&name))
}

/// Whether `name` is an address-space (VM) workload: one whose designs are whole address
/// spaces compared with `linux` (the report shows these first; the others are the building
/// blocks: RCU, interval maps, counters). False for a name this binary does not know.
pub fn is_address_space(name: &str) -> bool {
    find(name)
        .ok()
        .and_then(|w| w.baseline())
        .is_some_and(|b| b.design == vm::BASELINE.design)
}

/// The workload called `name`.
///
/// # Errors
/// [`BenchError::UnknownWorkload`] listing the known names.
pub fn find(name: &str) -> Result<&'static dyn Workload, BenchError> {
    all()
        .into_iter()
        .find(|w| w.name() == name)
        .ok_or_else(|| BenchError::UnknownWorkload {
            name: name.to_string(),
            known: all()
                .iter()
                .map(|w| w.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Resolves a design list for `workload`: `None` or empty means all of its designs.
///
/// # Errors
/// [`BenchError::UnknownDesign`] for the first name the workload does not have.
pub fn resolve_designs(
    workload: &dyn Workload,
    wanted: Option<&[String]>,
) -> Result<Vec<&'static str>, BenchError> {
    match wanted {
        None | Some([]) => Ok(workload.designs().to_vec()),
        Some(names) => names
            .iter()
            .map(|n| {
                workload
                    .designs()
                    .iter()
                    .copied()
                    .find(|d| d == n)
                    .ok_or_else(|| workload.unknown_design(n))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_knows_every_registered_name_and_rejects_others() {
        for w in all() {
            assert_eq!(find(w.name()).unwrap().name(), w.name());
        }
        let err = find("rcu-reed").err().unwrap();
        assert!(matches!(err, BenchError::UnknownWorkload { .. }));
        assert!(err.to_string().contains("rcu-read"));
    }

    #[test]
    fn the_vm_workloads_are_the_address_space_ones() {
        for w in [
            "alloc",
            "alloc-fault-modify",
            "local",
            "pipeline",
            "global",
            "fault-load",
            "fault-load-0pct",
            "fault-load-100pct",
            "soft-fault",
        ] {
            assert!(is_address_space(w), "{w}");
        }
        for w in [
            "rcu-read",
            "rcu-update",
            "ds-map",
            "readers-writers",
            "no-such",
        ] {
            assert!(!is_address_space(w), "{w}");
        }
    }

    #[test]
    fn fault_load_without_a_level_expands_to_the_four_levels() {
        let names = |ws: Vec<&dyn Workload>| ws.iter().map(|w| w.name()).collect::<Vec<_>>();
        assert_eq!(
            names(expand("fault-load", None).unwrap()),
            fault_load::LEVEL_NAMES
        );
        assert_eq!(
            names(expand("fault-load", Some(10)).unwrap()),
            ["fault-load"]
        );
        assert_eq!(names(expand("soft-fault", None).unwrap()), ["soft-fault"]);
        assert!(expand("fault-lod", None).is_err());
        assert!(selects("fault-load", "fault-load-25pct"));
        assert!(!selects("fault-load", "soft-fault"));
        assert!(selects("soft-fault", "soft-fault"));
    }

    #[test]
    fn resolve_designs_defaults_to_all_and_rejects_unknown_names() {
        let w = find("rcu-read").unwrap();
        assert_eq!(resolve_designs(w, None).unwrap(), w.designs());
        let some = vec!["qsbr".to_string(), "none".to_string()];
        assert_eq!(resolve_designs(w, Some(&some)).unwrap(), ["qsbr", "none"]);
        let bad = vec!["memb".to_string(), "rcu".to_string()];
        assert!(matches!(
            resolve_designs(w, Some(&bad)),
            Err(BenchError::UnknownDesign { .. })
        ));
    }
}
