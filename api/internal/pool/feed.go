package pool

import (
	"context"
	"sync"
)

// Feed runs fn on each value of ch on a goroutine of bg until ch closes
// or ctx ends, then calls cancel (the subscription's). Every resource
// package that turns a room's subscription into events (capacity
// changes, board alarms, alert transitions, KV block events) uses it.
func Feed[T any](ctx context.Context, bg *sync.WaitGroup, ch <-chan T, cancel func(), fn func(T)) {
	bg.Add(1)
	go func() {
		defer bg.Done()
		defer cancel()
		for {
			select {
			case <-ctx.Done():
				return
			case v, ok := <-ch:
				if !ok {
					return
				}
				fn(v)
			}
		}
	}()
}
