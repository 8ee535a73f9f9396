package kv_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/kv"
)

// otherRange stands for kv/evict.Range: the same shape, another package.
type otherRange struct{ DPA, Len uint64 }

type recorder struct {
	kv.Evictor
	added [][]otherRange
}

func (r *recorder) Add(id, size uint64, where []otherRange) { r.added = append(r.added, where) }

func TestAdapt(t *testing.T) {
	rec := &recorder{Evictor: kv.NewLRU()}
	ev := kv.Adapt[otherRange](rec)
	ev.Add(1, 4096, []kv.Range{{DPA: 0x1000, Len: 4096}})
	if diff := cmp.Diff([][]otherRange{{{DPA: 0x1000, Len: 4096}}}, rec.added); diff != "" {
		t.Errorf("ranges passed on (-want +got):\n%s", diff)
	}
}

func TestLRUOrder(t *testing.T) {
	p := kv.NewLRU()
	for id := uint64(1); id <= 4; id++ {
		p.Add(id, 10, nil)
	}
	p.Touch(1)
	p.Remove(3)
	if got, want := p.Victims(15, func(id uint64) bool { return id == 2 }), []uint64{4, 1}; !cmp.Equal(got, want) {
		t.Errorf("victims %v, want %v", got, want)
	}
	if p.Len() != 3 {
		t.Errorf("len %d, want 3", p.Len())
	}
}
