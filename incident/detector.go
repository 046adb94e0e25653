package incident

import (
	"sync"
	"time"
)

// Detector counts distinct failing events per fingerprint in a sliding
// window. It is bounded: at most MaxTracked fingerprints (the least
// recently failing one is forgotten first) and, per fingerprint, at most
// threshold event IDs, since the count never needs to pass it.
type Detector struct {
	threshold int
	window    time.Duration

	mu     sync.Mutex
	tracks map[string]*track
}

// MaxTracked bounds the fingerprints a detector follows at once.
const MaxTracked = 1024

type track struct {
	seen map[string]time.Time // event ID → when it last failed
	last time.Time
}

// NewDetector opens an incident at threshold distinct events within window.
func NewDetector(threshold int, window time.Duration) *Detector {
	return &Detector{threshold: threshold, window: window, tracks: map[string]*track{}}
}

// Observe records that eventID failed with fingerprint fp at now and
// reports whether the fingerprint has reached the threshold: threshold
// distinct events within the window, this one included. The same event
// failing again (a rerun of its batch) counts once.
func (d *Detector) Observe(fp, eventID string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.tracks[fp]
	if t == nil {
		if len(d.tracks) >= MaxTracked {
			d.evictLocked()
		}
		t = &track{seen: map[string]time.Time{}}
		d.tracks[fp] = t
	}
	t.last = now
	t.expire(now.Add(-d.window))
	if _, ok := t.seen[eventID]; ok || len(t.seen) < d.threshold {
		t.seen[eventID] = now
	}
	return len(t.seen) >= d.threshold
}

// Forget drops fp's count (its incident opened, or was resolved).
func (d *Detector) Forget(fp string) {
	d.mu.Lock()
	delete(d.tracks, fp)
	d.mu.Unlock()
}

func (t *track) expire(cutoff time.Time) {
	for id, at := range t.seen {
		if at.Before(cutoff) {
			delete(t.seen, id)
		}
	}
}

func (d *Detector) evictLocked() {
	var oldest string
	var at time.Time
	for fp, t := range d.tracks {
		if oldest == "" || t.last.Before(at) {
			oldest, at = fp, t.last
		}
	}
	delete(d.tracks, oldest)
}
