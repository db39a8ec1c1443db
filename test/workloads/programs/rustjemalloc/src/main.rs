//! rustjemalloc: rustalloc's known site with jemalloc as the global
//! allocator. `fill_buffers` allocates 64 buffers of 10,000 bytes (each
//! with an alignment of 64, so that jemalloc's mallocx is called with
//! flags) and `churn` allocates and frees 1,000 boxes of 5,000 bytes; it
//! prints a checksum of what it wrote.

use std::alloc::{alloc, dealloc, Layout};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const BUFFERS: usize = 64;
const BUFFER_BYTES: usize = 10_000;

#[inline(never)]
fn fill_buffers(all: &mut Vec<*mut u8>) {
    let layout = Layout::from_size_align(BUFFER_BYTES, 64).unwrap();
    for i in 0..BUFFERS {
        // SAFETY: layout has a non-zero size; the block is written within it.
        unsafe {
            let p = alloc(layout);
            assert!(!p.is_null());
            for j in 0..BUFFER_BYTES {
                *p.add(j) = ((i * 31 + j * 7) % 251) as u8;
            }
            all.push(p);
        }
    }
}

#[inline(never)]
fn churn() -> u64 {
    let mut sum = 0u64;
    for i in 0..1000usize {
        let b = std::hint::black_box(vec![(i % 251) as u8; 5000].into_boxed_slice());
        sum += b[i % 5000] as u64;
    }
    sum
}

fn main() {
    let mut buffers = Vec::with_capacity(BUFFERS);
    fill_buffers(&mut buffers);
    let mut sum = churn();
    let layout = Layout::from_size_align(BUFFER_BYTES, 64).unwrap();
    for p in buffers {
        // SAFETY: p came from alloc(layout) above and is freed once.
        unsafe {
            sum += *p.add(BUFFER_BYTES - 1) as u64;
            dealloc(p, layout);
        }
    }
    println!("{} buffers of {} bytes, checksum {}", BUFFERS, BUFFER_BYTES, sum);
}
