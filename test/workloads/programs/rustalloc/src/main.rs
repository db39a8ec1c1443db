//! rustalloc allocates a known number of bytes at a known function,
//! `fill_buffers`, and prints the FNV-1a hash (the `fnv` crate) of what it
//! wrote: a known answer the test computes independently.

use std::hash::Hasher;

/// Buffers `fill_buffers` allocates, and the bytes of each.
const BUFFERS: usize = 64;
const BUFFER_BYTES: usize = 10_000;

/// One allocation of `BUFFER_BYTES` per buffer, each with its own contents,
/// and no other: `all` comes with room for every buffer.
#[inline(never)]
fn fill_buffers(all: &mut Vec<Vec<u8>>) {
    for i in 0..BUFFERS {
        let mut b = Vec::with_capacity(BUFFER_BYTES);
        for j in 0..BUFFER_BYTES {
            b.push(((i * 31 + j * 7) % 251) as u8);
        }
        all.push(b);
    }
}

fn main() {
    let mut buffers = Vec::with_capacity(BUFFERS);
    fill_buffers(&mut buffers);
    let mut h = fnv::FnvHasher::default();
    for b in &buffers {
        h.write(b);
    }
    println!("{} buffers of {} bytes, fnv1a64 {:016x}", buffers.len(), BUFFER_BYTES, h.finish());
}
