package kv_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"cxlpool/dcd"
	"cxlpool/fabric/cci"
	"cxlpool/kv"
)

// The index's design was chosen by these: the in-memory index with its
// write-ahead log against SQLite (modernc, WAL, synchronous FULL) with the
// same group commit, both doing what a commit and a get need. Each
// reports ops/s, and the process's CPU (getrusage user+system around the
// timed loop, so it includes the fsyncs' kernel time, the Go runtime's
// and the benchmark's own work) as µs per op and as ops per CPU-second:
// the box's management CPU is small, and what it sustains is ops per
// CPU-second, not per wall-clock second on a shared machine. Run both
// sub-benchmarks in one `go test -bench` to compare them (the README
// gives the ratios of one run).

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, start time.Time, cpu0 time.Duration) {
	el := time.Since(start)
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/el.Seconds(), "ops/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	if cpu > 0 {
		b.ReportMetric(float64(b.N)/cpu.Seconds(), "ops/cpu-s")
	}
}

func benchIndex(b *testing.B) *kv.Index {
	ix, err := kv.OpenIndex(kv.IndexConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ix.Close() })
	if err := ix.CreateNamespace("ns", 1<<30, 64<<30); err != nil {
		b.Fatal(err)
	}
	for i := range 64 {
		if err := ix.AddChunk("ns", kv.ChunkInfo{ID: dcd.ChunkID(i + 1), Tag: cci.Tag{byte(i)}, Size: 1 << 30}); err != nil {
			b.Fatal(err)
		}
	}
	if err := ix.SetMember("ns", 0, tok(1)); err != nil {
		b.Fatal(err)
	}
	return ix
}

// BenchmarkCommit: put + commit of one 256 KiB block per op, from 16
// clients at once (group commit shares the fsyncs).
func BenchmarkCommit(b *testing.B) {
	b.Run("wal", func(b *testing.B) {
		ix := benchIndex(b)
		var n atomic.Int64
		b.SetParallelism(8)
		start, cpu0 := time.Now(), cpuTime()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			s, err := ix.Open("ns", 0, tok(1), 0)
			if err != nil {
				b.Error(err)
				return
			}
			defer s.Close()
			for pb.Next() {
				k := binary.LittleEndian.AppendUint64(nil, uint64(n.Add(1)))
				res, err := s.Put(context.Background(), []kv.PutItem{{Key: k, Length: 256 << 10}})
				if err != nil || res[0].Err != nil {
					b.Error(err, res[0].Err)
					return
				}
				if errs, err := s.Commit([]uint64{res[0].Block.ID}); err != nil || errs[0] != nil {
					b.Error(err, errs[0])
					return
				}
			}
		})
		report(b, start, cpu0)
	})
	b.Run("sqlite", func(b *testing.B) {
		db := benchSQLite(b)
		g := newGroup(db)
		defer g.close()
		var n atomic.Int64
		b.SetParallelism(8)
		start, cpu0 := time.Now(), cpuTime()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				id := n.Add(1)
				if err := g.insert(id, binary.LittleEndian.AppendUint64(nil, uint64(id))); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b, start, cpu0)
	})
}

// BenchmarkGet: locate one of 100 000 committed keys.
func BenchmarkGet(b *testing.B) {
	const keys = 100000
	b.Run("wal", func(b *testing.B) {
		ix := benchIndex(b)
		s, err := ix.Open("ns", 0, tok(1), 0)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for i := 0; i < keys; i += 1000 {
			items := make([]kv.PutItem, 0, 1000)
			for j := i; j < i+1000; j++ {
				items = append(items, kv.PutItem{Key: binary.LittleEndian.AppendUint64(nil, uint64(j)), Length: 4096})
			}
			res, _ := s.Put(context.Background(), items)
			ids := make([]uint64, 0, len(res))
			for _, r := range res {
				ids = append(ids, r.Block.ID)
			}
			s.Commit(ids)
		}
		start, cpu0 := time.Now(), cpuTime()
		b.ResetTimer()
		for i := range b.N {
			res, _ := s.Get([][]byte{binary.LittleEndian.AppendUint64(nil, uint64(i%keys))}, false)
			if res[0].Err != nil {
				b.Fatal(res[0].Err)
			}
		}
		report(b, start, cpu0)
	})
	b.Run("sqlite", func(b *testing.B) {
		db := benchSQLite(b)
		tx, _ := db.Begin()
		for i := range keys {
			if _, err := tx.Exec(`INSERT INTO blocks(id, ns, key, chunk, off, len, gen) VALUES (?, 'ns', ?, 1, ?, 4096, ?)`,
				i, binary.LittleEndian.AppendUint64(nil, uint64(i)), i*4096, i); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		st, err := db.Prepare(`SELECT id, chunk, off, len, gen FROM blocks WHERE ns = 'ns' AND key = ?`)
		if err != nil {
			b.Fatal(err)
		}
		start, cpu0 := time.Now(), cpuTime()
		b.ResetTimer()
		for i := range b.N {
			var id, chunk, off, length, gen int64
			if err := st.QueryRow(binary.LittleEndian.AppendUint64(nil, uint64(i%keys))).Scan(&id, &chunk, &off, &length, &gen); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start, cpu0)
	})
}

func benchSQLite(b *testing.B) *sql.DB {
	dsn := "file:" + filepath.Join(b.TempDir(), "kv.db") + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		b.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	b.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE blocks (id INTEGER PRIMARY KEY, ns TEXT, key BLOB, chunk INTEGER, off INTEGER, len INTEGER, gen INTEGER);
		CREATE UNIQUE INDEX blocks_key ON blocks(ns, key)`); err != nil {
		b.Fatal(err)
	}
	return db
}

// group is SQLite with the index's group commit: inserts queued while a
// transaction commits go into the next one.
type group struct {
	db   *sql.DB
	mu   sync.Mutex
	q    []groupReq
	kick chan struct{}
	done chan struct{}
}

type groupReq struct {
	id  int64
	key []byte
	err chan error
}

func newGroup(db *sql.DB) *group {
	g := &group{db: db, kick: make(chan struct{}, 1), done: make(chan struct{})}
	go g.loop()
	return g
}

func (g *group) insert(id int64, key []byte) error {
	r := groupReq{id: id, key: key, err: make(chan error, 1)}
	g.mu.Lock()
	g.q = append(g.q, r)
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
	return <-r.err
}

func (g *group) loop() {
	defer close(g.done)
	for range g.kick {
		g.mu.Lock()
		q := g.q
		g.q = nil
		g.mu.Unlock()
		if len(q) == 0 {
			continue
		}
		err := func() error {
			tx, err := g.db.Begin()
			if err != nil {
				return err
			}
			st, err := tx.Prepare(`INSERT INTO blocks(id, ns, key, chunk, off, len, gen) VALUES (?, 'ns', ?, 1, ?, 262144, ?)`)
			if err != nil {
				tx.Rollback()
				return err
			}
			for _, r := range q {
				if _, err := st.Exec(r.id, r.key, r.id*262144, r.id); err != nil {
					tx.Rollback()
					return fmt.Errorf("insert: %w", err)
				}
			}
			return tx.Commit()
		}()
		for _, r := range q {
			r.err <- err
		}
	}
}

func (g *group) close() { close(g.kick); <-g.done }
