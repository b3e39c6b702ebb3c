//! Spaces built in a shared `Memory` (`Builder::build_in`), for every design: one frame budget
//! for several spaces and files, frames that go back to the memory when a space goes (its
//! exit unmaps everything), and a full memory that a fault reports as out of memory.

#![cfg(not(loom))]

use aspace_vm::{AddressSpace, Design, Fault, File, MapFlags, Memory, Prot, PAGE_SIZE};

const P: u64 = PAGE_SIZE;
const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

fn space(design: Design, memory: &Memory) -> AddressSpace {
    AddressSpace::builder()
        .design(design)
        .max_cores(4)
        .build_in(memory)
        .unwrap()
}

/// Maps `pages` populated private pages and writes a byte to each; returns the start.
fn populate(space: &AddressSpace, pages: u64) -> u64 {
    let mut h = space.attach().unwrap();
    let a = h
        .mmap(0, pages * P, Prot::READ_WRITE, PA | MapFlags::POPULATE)
        .unwrap();
    for i in 0..pages {
        h.write(a + i * P, &[i as u8 + 1]).unwrap();
    }
    a
}

#[test]
fn a_space_gives_its_frames_back_to_a_shared_memory_when_it_goes() {
    for &design in Design::ALL {
        let m = Memory::new(1024 * P).unwrap();
        let a = space(design, &m);
        let b = space(design, &m);
        populate(&a, 100);
        let kept = populate(&b, 50);
        assert_eq!(
            m.frames_in_use(),
            150,
            "{design:?}: both spaces draw on one memory"
        );
        assert_eq!(
            a.stats().frames_in_use,
            150,
            "{design:?}: stats show the memory's frames"
        );
        drop(a);
        assert_eq!(
            m.frames_in_use(),
            50,
            "{design:?}: the dropped space's frames came back"
        );
        let mut h = b.attach().unwrap();
        let mut byte = [0];
        h.read(kept + 49 * P, &mut byte).unwrap();
        assert_eq!(byte, [50], "{design:?}: the other space is untouched");
        drop(h);
        drop(b);
        assert_eq!(m.frames_in_use(), 0, "{design:?}");
    }
}

#[test]
fn spaces_and_files_share_one_budget() {
    for &design in Design::ALL {
        // 256 frames; a core's cache takes 64 at a time.
        let m = Memory::new(256 * P).unwrap();
        let f = File::create(&m, 0).unwrap();
        assert_eq!(
            f.write_at(0, &vec![7; 100 * P as usize]).unwrap(),
            100 * P as usize
        );
        let s = space(design, &m);
        let mut h = s.attach().unwrap();
        let a = h.mmap(0, 200 * P, Prot::READ_WRITE, PA).unwrap();
        let mut failed_at = None;
        for i in 0..200 {
            match h.write(a + i * P, &[1]) {
                Ok(()) => {}
                Err(Fault::OutOfMemory { addr }) => {
                    failed_at = Some((i, addr));
                    break;
                }
                Err(e) => panic!("{design:?}: {e:?}"),
            }
        }
        let (i, addr) = failed_at.expect("the memory cannot hold 300 pages");
        assert_eq!(addr, a + i * P, "{design:?}");
        // 100 file pages, 28 frames left in the file I/O cache (it took two batches of 64),
        // and the space's 128 (two batches) fill the memory: caches are not raided
        // (`frames.rs`, "Exhaustion").
        assert_eq!(i, 128, "{design:?}");
        // The file's truncation frees frames the space can use.
        f.set_len(0).unwrap();
        h.write(a + i * P, &[1]).unwrap();
        drop(h);
        drop(s);
        assert_eq!(m.frames_in_use(), 0, "{design:?}");
        drop(f);
    }
}

#[test]
fn a_memory_outlives_its_handle_while_spaces_use_it() {
    let m = Memory::new(64 * P).unwrap();
    let s = space(Design::Coarse, &m);
    let watcher = m.clone();
    drop(m);
    populate(&s, 10);
    assert_eq!(watcher.frames_in_use(), 10);
    drop(s);
    assert_eq!(watcher.frames_in_use(), 0);
}
