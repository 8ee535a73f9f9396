package rawio

import (
	"testing"
	"time"
)

// TestChooser: each way gets a window of samples (poll first), then the
// way whose waits were shorter by their median is taken, the other every
// exploreEvery waits, and a change in what each way costs turns it over.
func TestChooser(t *testing.T) {
	tests := []struct {
		name         string
		sleep, poll  time.Duration // what a wait costs each way
		wantBest     int
		thenSleep    time.Duration // later costs
		thenPoll     time.Duration
		wantBestThen int
	}{
		{"polling saves a wake-up", 60 * time.Microsecond, 25 * time.Microsecond, 1, 60 * time.Microsecond, 25 * time.Microsecond, 1},
		{"polling keeps the CPU from the peer", 10 * time.Microsecond, 55 * time.Microsecond, 0, 10 * time.Microsecond, 55 * time.Microsecond, 0},
		{"the peer moves to the polling CPU", 60 * time.Microsecond, 25 * time.Microsecond, 1, 10 * time.Microsecond, 55 * time.Microsecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ch chooser
			cost := [2]time.Duration{tt.sleep, tt.poll}
			var ways []int
			for range 2 * window {
				w := ch.next()
				ways = append(ways, w)
				ch.took(w, cost[w])
			}
			for i, w := range ways {
				want := 0
				if i < window {
					want = 1
				}
				if w != want {
					t.Fatalf("wait %d went way %d, want %d (a window of polls, then of sleeps): %v", i, w, want, ways)
				}
			}
			if got := ch.best; got != tt.wantBest {
				t.Errorf("after the first samples: best %d, want %d", got, tt.wantBest)
			}
			cost = [2]time.Duration{tt.thenSleep, tt.thenPoll}
			other := 0
			n := exploreEvery * (window + 1)
			for range n {
				w := ch.next()
				if w != ch.best {
					other++
				}
				ch.took(w, cost[w])
			}
			if got := ch.best; got != tt.wantBestThen {
				t.Errorf("later: best %d, want %d", got, tt.wantBestThen)
			}
			if other == 0 || other > n/exploreEvery+window {
				t.Errorf("the other way was taken %d times in %d waits, want about one in %d", other, n, exploreEvery)
			}
		})
	}
}
