// Package trace generates a serving trace for the KV store and simulates
// eviction policies against it.
//
// The trace is what a cluster of LLM servers on the box's eight heads asks
// of a shared KV namespace: requests arrive at a steady rate, each belongs
// to a multi-turn session, each session starts from one of a set of shared
// system prompts, and both prompts and sessions are picked with Zipf
// popularity. A request's prompt is the session's context so far plus a new
// user message; its full blocks, in prefix order, are what the server looks
// up (a prefix cache reuses blocks up to the first miss and recomputes the
// rest). After the answer the context grows by the user message and the
// answer, so the next turn's prompt has the previous one as its prefix.
//
// KV is sized as Llama-3-70B's: 80 layers × 8 KV heads × 128 dims × 2 (K
// and V) × 2 bytes (bf16) = 327,680 bytes (320 KiB) per token. A block is
// LMCache's default chunk of 256 tokens (chunk_size = 256), so 80 MiB; as
// in LMCache and vLLM only full blocks are stored, and a block's key is a
// hash of every token up to its end, so the block that straddles the end
// of the system prompt already belongs to one session.
//
// Everything is deterministic from Config.Seed.
package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Llama-3-70B KV per token: layers × KV heads × head dim × (K, V) × bf16.
const (
	Layers        = 80
	KVHeads       = 8
	HeadDim       = 128
	BytesPerToken = Layers * KVHeads * HeadDim * 2 * 2 // 327,680
	BlockTokens   = 256                                // LMCache chunk_size default
	BlockBytes    = BytesPerToken * BlockTokens        // 80 MiB
)

// Config shapes a trace. Zero fields take the defaults noted.
type Config struct {
	Seed     uint64
	Hosts    int     // serving hosts, one per head (default 8)
	Requests int     // default 8000
	Rate     float64 // requests per second over the cluster (default 32)

	SystemPrompts int // distinct shared system prompts (default 48)
	// SystemMin/Max bound a system prompt's length in tokens (default
	// 1024…6144: 4…24 blocks).
	SystemMin, SystemMax int
	PromptZipf           float64 // Zipf exponent of prompt popularity (default 1.0)

	// Sessions is the number of session slots (default 384): a request
	// continues the session in a slot picked with Zipf popularity; a
	// session that would outgrow MaxContext ends and a new one takes its
	// slot.
	Sessions    int
	SessionZipf float64 // default 0.9
	// UserMin/Max and AnswerMin/Max bound a turn's tokens (defaults
	// 64…512 and 128…768).
	UserMin, UserMax     int
	AnswerMin, AnswerMax int
	MaxContext           int // tokens (default 16384)
	// Sticky is the probability that a turn is served by the host that
	// served the session's previous turn (default 0.75); otherwise any
	// host, as a load balancer would.
	Sticky float64
}

func (c *Config) defaults() error {
	for _, d := range []struct {
		p *int
		v int
	}{
		{&c.Hosts, 8}, {&c.Requests, 8000}, {&c.SystemPrompts, 48}, {&c.SystemMin, 1024}, {&c.SystemMax, 6144},
		{&c.Sessions, 384}, {&c.UserMin, 64}, {&c.UserMax, 512}, {&c.AnswerMin, 128}, {&c.AnswerMax, 768}, {&c.MaxContext, 16384},
	} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	for _, d := range []struct {
		p *float64
		v float64
	}{{&c.Rate, 32}, {&c.PromptZipf, 1.0}, {&c.SessionZipf, 0.9}, {&c.Sticky, 0.75}} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	switch {
	case c.Hosts < 1 || c.Requests < 1 || c.SystemPrompts < 1 || c.Sessions < 1:
		return fmt.Errorf("trace: config: hosts, requests, prompts and sessions must be positive")
	case c.SystemMin < 1 || c.SystemMax < c.SystemMin, c.UserMin < 1 || c.UserMax < c.UserMin, c.AnswerMin < 0 || c.AnswerMax < c.AnswerMin:
		return fmt.Errorf("trace: config: a token range is empty")
	case c.MaxContext < c.SystemMax+c.UserMax+c.AnswerMax:
		return fmt.Errorf("trace: config: MaxContext %d cannot hold the longest system prompt and one turn", c.MaxContext)
	case c.Rate <= 0 || c.PromptZipf < 0 || c.SessionZipf < 0 || c.Sticky < 0 || c.Sticky > 1:
		return fmt.Errorf("trace: config: rate, Zipf exponents or stickiness out of range")
	}
	return nil
}

// Key identifies a block: the hash of all tokens up to its end.
type Key uint64

// Request is one prompt served by one host.
type Request struct {
	At      time.Duration // since the trace began
	Host    int
	Session uint64 // unique per session, never reused
	Prompt  int    // system prompt index
	Tokens  int    // prompt length
	Blocks  []Key  // full blocks of the prompt, in prefix order
	Shared  int    // how many leading Blocks belong to the system prompt
}

// Trace is a generated trace.
type Trace struct {
	Config   Config
	Requests []Request
}

// zipf draws 0…n−1 with P(i) ∝ 1/(i+1)^s, for any s ≥ 0 (math/rand's
// needs s > 1), by inverting a table of the CDF.
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) zipf {
	z := zipf{cdf: make([]float64, n)}
	var sum float64
	for i := range n {
		sum += 1 / math.Pow(float64(i+1), s)
		z.cdf[i] = sum
	}
	for i := range z.cdf {
		z.cdf[i] /= sum
	}
	return z
}

func (z zipf) draw(r *rand.Rand) int {
	i, _ := slices.BinarySearch(z.cdf, r.Float64())
	return min(i, len(z.cdf)-1)
}

// mix is SplitMix64's finaliser: block keys are hashes of (owner, index).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func blockKey(owner uint64, i int) Key { return Key(mix(owner*0x9e3779b97f4a7c15 + uint64(i) + 1)) }

// Generate builds the trace for cfg.
func Generate(cfg Config) (*Trace, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(cfg.Seed, 0x6b76747261636521))
	between := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }

	sysLen := make([]int, cfg.SystemPrompts)
	for i := range sysLen {
		sysLen[i] = between(cfg.SystemMin, cfg.SystemMax)
	}
	prompts := newZipf(cfg.SystemPrompts, cfg.PromptZipf)
	slots := newZipf(cfg.Sessions, cfg.SessionZipf)

	type session struct {
		id     uint64 // 0: the slot is empty
		prompt int
		ctx    int // tokens of context so far
		host   int
	}
	sess := make([]session, cfg.Sessions)
	var nextID uint64
	t := &Trace{Config: cfg, Requests: make([]Request, 0, cfg.Requests)}
	for n := range cfg.Requests {
		s := &sess[slots.draw(r)]
		user := between(cfg.UserMin, cfg.UserMax)
		if s.id == 0 || s.ctx+user+cfg.AnswerMax > cfg.MaxContext {
			nextID++
			p := prompts.draw(r)
			*s = session{id: nextID, prompt: p, ctx: sysLen[p], host: r.IntN(cfg.Hosts)}
		} else if r.Float64() >= cfg.Sticky {
			s.host = r.IntN(cfg.Hosts)
		}
		tokens := s.ctx + user
		req := Request{
			At:      time.Duration(float64(n) / cfg.Rate * float64(time.Second)),
			Host:    s.host,
			Session: s.id,
			Prompt:  s.prompt,
			Tokens:  tokens,
			Blocks:  make([]Key, tokens/BlockTokens),
		}
		// System prompt owners are 1…P with the top bit set; sessions are
		// their id: the two never collide.
		for i := range req.Blocks {
			if (i+1)*BlockTokens <= sysLen[s.prompt] {
				req.Blocks[i] = blockKey(1<<63|uint64(s.prompt+1), i)
				req.Shared++
			} else {
				req.Blocks[i] = blockKey(s.id, i)
			}
		}
		t.Requests = append(t.Requests, req)
		s.ctx = tokens + between(cfg.AnswerMin, cfg.AnswerMax)
	}
	return t, nil
}

// Distinct is the number of distinct blocks the trace asks for.
func (t *Trace) Distinct() int {
	seen := make(map[Key]struct{})
	for _, r := range t.Requests {
		for _, k := range r.Blocks {
			seen[k] = struct{}{}
		}
	}
	return len(seen)
}

// WorkingSet is the bytes of every distinct block the trace asks for.
func (t *Trace) WorkingSet() uint64 { return uint64(t.Distinct()) * BlockBytes }

// Live is the trace's working set in Denning's sense, in blocks: the
// largest number of blocks that are live at once, i.e. used before and
// again after some request. A cache of Live blocks with a clairvoyant
// policy misses only first uses; every distinct block (Distinct) is more
// than that, since blocks used once, or no longer, need no room.
func (t *Trace) Live() int {
	first := make(map[Key]int)
	last := make(map[Key]int)
	for i, r := range t.Requests {
		for _, k := range r.Blocks {
			if _, ok := first[k]; !ok {
				first[k] = i
			}
			last[k] = i
		}
	}
	// +1 at the request after the first use, −1 after the last.
	delta := make([]int, len(t.Requests)+1)
	for k, f := range first {
		if l := last[k]; l > f {
			delta[f+1]++
			delta[l+1]--
		}
	}
	live, peak := 0, 0
	for _, d := range delta {
		live += d
		peak = max(peak, live)
	}
	return peak
}
