package heap

// held holds the events a streamed replay read and cannot apply yet, and
// gives them back in replay order: by time, then stream, then read order.
// Each stream's records are close to time order in the file (its ring is
// written in order, up to threads that stamp a record and write it a
// little later); the streams are not (the agent drains one ring, then the
// next). So each stream has a queue in replay order, and a heap of the
// streams orders their first events: a push or pop moves a few stream
// indexes, not events.
type held struct {
	n      int      // events held
	queues []queue  // by stream index
	heap   []uint32 // stream indexes with events held, a min-heap by first event
	pos    []int32  // by stream index: its place in heap, -1 if none
}

// queue is one stream's held events, in replay order from head on.
type queue struct {
	ev   []sevent
	head int
}

func (q *queue) first() *sevent { return &q.ev[q.head] }
func (q *queue) len() int       { return len(q.ev) - q.head }

// before reports whether event x goes before y in replay order.
func before(x, y *sevent) bool {
	if x.key != y.key {
		return x.key.less(y.key)
	}
	return x.read < y.read
}

func (h *held) push(e *sevent) {
	for int(e.si) >= len(h.queues) {
		h.queues = append(h.queues, queue{})
		h.pos = append(h.pos, -1)
	}
	q := &h.queues[e.si]
	if q.head > 0 && q.head == len(q.ev) { // empty: start over at the front
		q.ev, q.head = q.ev[:0], 0
	} else if q.head > 1024 && 2*q.head > len(q.ev) { // mostly consumed: move the rest down
		q.ev, q.head = q.ev[:copy(q.ev, q.ev[q.head:])], 0
	}
	// Insert in order from the back: a late thread's record goes a few
	// places back at most, after those of the same key read before it.
	i := len(q.ev)
	q.ev = append(q.ev, *e)
	for i > q.head && before(e, &q.ev[i-1]) {
		q.ev[i] = q.ev[i-1]
		i--
	}
	q.ev[i] = *e
	h.n++
	switch {
	case h.pos[e.si] < 0:
		h.pos[e.si] = int32(len(h.heap))
		h.heap = append(h.heap, e.si)
		h.up(int(h.pos[e.si]))
	case i == q.head: // a new first event
		h.up(int(h.pos[e.si]))
	}
}

// min returns the first event held; there must be one.
func (h *held) min() *sevent { return h.queues[h.heap[0]].first() }

// pop removes the first event held and returns it, valid until the next
// push.
func (h *held) pop() *sevent {
	si := h.heap[0]
	q := &h.queues[si]
	e := q.first()
	q.head++
	h.n--
	if q.len() == 0 {
		last := len(h.heap) - 1
		h.swap(0, last)
		h.heap = h.heap[:last]
		h.pos[si] = -1
	}
	if len(h.heap) > 0 {
		h.down(0)
	}
	return e
}

func (h *held) less(i, j int) bool {
	return before(h.queues[h.heap[i]].first(), h.queues[h.heap[j]].first())
}

func (h *held) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.pos[h.heap[i]], h.pos[h.heap[j]] = int32(i), int32(j)
}

func (h *held) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *held) down(i int) {
	for {
		l, m := 2*i+1, i
		if l < len(h.heap) && h.less(l, m) {
			m = l
		}
		if l+1 < len(h.heap) && h.less(l+1, m) {
			m = l + 1
		}
		if m == i {
			return
		}
		h.swap(i, m)
		i = m
	}
}
