package collect

import (
	"math/bits"
	"math/rand/v2"
)

// Stack IDs by content: a stack gets one ID however it was merged, whole
// or from its thread's latest (deltaMerge), as reports may group by ID.
//
// The index keys a stack by a 128-bit hash of its Locations, folded from
// the root to the leaf, so that a stack sharing outer Locations with its
// thread's latest (nearly every one at --rate 1) hashes only its own inner
// ones and takes the rest from that one's suffix hashes, instead of
// encoding and hashing its ~40 Locations and keeping them to compare (py_torch
// at --rate 1: 896 k stacks, 90 MB of keys). Equal stacks always have
// equal hashes. Two different ones share an ID only if both 64-bit lanes
// collide; each lane is a multiply-fold under its own secret, drawn anew
// for every run (so a target cannot choose stacks that collide), and
// mixes in the other: not a proven universal hash, but taken as a random
// function, a pair collides with probability 2^-128, and 10^7 stacks
// with below 10^-24, far below the odds of a memory error. A collision
// would charge one stack's allocations to the other.

// stackHash is the hash of a stack's Locations from some index to its root.
type stackHash [2]uint64

// stackSeeds are a Collector's: the hash of the empty stack, and the
// secrets each lane mixes in.
type stackSeeds struct {
	root stackHash
	k    [2]uint64
}

func newStackSeeds() stackSeeds {
	return stackSeeds{root: stackHash{rand.Uint64(), rand.Uint64()}, k: [2]uint64{rand.Uint64() | 1, rand.Uint64() | 1}}
}

// push returns the hash of loc followed by the stack whose hash is h: each
// lane a multiply-fold (as wyhash's) of the lane and the Location under its
// own secret.
func (k *stackSeeds) push(h stackHash, loc uint64) stackHash {
	hi0, lo0 := bits.Mul64(h[0]^loc, k.k[0])
	hi1, lo1 := bits.Mul64(h[1]+loc, k.k[1]^0x9e3779b97f4a7c15)
	return stackHash{hi0 ^ lo0 ^ h[1], hi1 ^ lo1 ^ h[0]}
}

// suffixes sets suf[i] to the hash of locs[i:], for every i, and returns
// the hash of the whole stack. The last n of locs are the last n of
// parent's Locations, whose suffix hashes are psuf: they are not hashed
// again.
func (k *stackSeeds) suffixes(suf []stackHash, locs []uint64, psuf []stackHash, n int) stackHash {
	copy(suf[len(locs)-n:], psuf[len(psuf)-n:])
	h := k.root
	if n > 0 {
		h = suf[len(locs)-n]
	}
	for i := len(locs) - n - 1; i >= 0; i-- {
		h = k.push(h, locs[i])
		suf[i] = h
	}
	return h
}

// stackIndex maps stacks' hashes to their IDs: by the first lane, whose
// map Go looks up fastest, and the second beside the ID; the few stacks
// whose first lane another holds go to a map by the whole hash.
type stackIndex struct {
	m    map[uint64]stackEntry
	more map[stackHash]uint64
}

type stackEntry struct{ h1, id uint64 }

func newStackIndex() *stackIndex { return &stackIndex{m: map[uint64]stackEntry{}} }

// get returns h's ID, or says whether another hash holds its first lane
// (taken), for put.
func (x *stackIndex) get(h stackHash) (id uint64, ok, taken bool) {
	e, taken := x.m[h[0]]
	if taken && e.h1 == h[1] {
		return e.id, true, true
	}
	if taken && x.more != nil {
		id, ok = x.more[h]
	}
	return id, ok, taken
}

// put adds h, which get did not find, saying taken.
func (x *stackIndex) put(h stackHash, id uint64, taken bool) {
	if !taken {
		x.m[h[0]] = stackEntry{h[1], id}
		return
	}
	if x.more == nil {
		x.more = map[stackHash]uint64{}
	}
	x.more[h] = id
}
