//! User-space RCU for aspace: domains, registered readers, grace periods and batched deferred
//! reclamation (DESIGN §3; seeds: rcu-for-helenos-thesis.txt chapters 2-4, §4.4).
//!
//! SKELETON: the public surface below is fixed; the bodies are being written (issue 2).
//!
//! ```text
//! let domain: Domain = Domain::new();          // memb flavor by default
//! let reader = domain.register();              // once per thread (RAII; Send, !Sync)
//! { let g = reader.read(); /* load RCU pointers, use them while `g` lives */ }
//! domain.defer_drop(old_value);                // dropped after a grace period
//! domain.synchronize();                        // waits for all pre-existing readers
//! domain.barrier();                            // waits for every callback queued so far
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

mod domain;
pub mod flavor;

pub use domain::{Domain, Guard, Reader};
pub use flavor::{Flavor, Memb, MembMode, Qsbr};
