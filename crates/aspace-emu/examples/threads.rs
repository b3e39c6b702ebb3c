//! Several guest threads, each an OS thread with its own core of one address space, allocate,
//! fill, sum, protect, free and fault on guest memory; the host checks every result and exits
//! non-zero if one is wrong.
//!
//! `cargo run --release -p aspace-emu --example threads [design] [threads] [rounds]`

use aspace_vm::Design;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let design = args
        .first()
        .map_or(Some(Design::default()), |n| Design::from_name(n));
    let Some(design) = design else {
        eprintln!("threads: unknown design {:?}", args[0]);
        std::process::exit(2);
    };
    let number = |i: usize, default: u64| args.get(i).map_or(Ok(default), |s| s.parse::<u64>());
    let (Ok(threads), Ok(rounds)) = (number(1, 4), number(2, 50)) else {
        eprintln!("usage: threads [design] [threads] [rounds]");
        std::process::exit(2);
    };
    const WORDS: u64 = 1024; // two pages per chunk
    match aspace_emu::guest::demo(design, threads, rounds, WORDS) {
        Ok(report) => {
            for (tid, (sum, faults, steps)) in report.threads.iter().enumerate() {
                println!(
                    "guest thread {tid}: sum {sum} (checked), fault codes {faults} \
                     ({rounds} SEGV_ACCERR + {rounds} SEGV_MAPERR handled), {steps} instructions"
                );
            }
            println!(
                "{} guest threads on design {}: all results correct; {} frame in use at the end",
                threads,
                design.name(),
                report.frames_in_use
            );
        }
        Err(e) => {
            eprintln!("threads: WRONG RESULT: {e}");
            std::process::exit(1);
        }
    }
}
