package guest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Kernel modules load through u-root's kmodule: its Prober reads
// modules.dep (the build trims it to the image's modules), marks what
// modules.builtin and /proc/modules say is there, and loads a module's
// dependencies first, side by side and each once, however many probes
// ask for it at the same time (compressed .ko.xz/.ko.zst/.ko.gz too). On
// top of it ProbeConcurrently starts the probes of a stage at most
// parallel at a time, in the list's order: under emulation a module's
// load is mostly CPU, and the kernel links and initialises independent
// modules side by side.

// ModuleResult is how probing one module (and its dependencies) went.
type ModuleResult struct {
	Name string
	Took time.Duration
	Err  error
}

// ReadModuleList reads the image's load list (one module name per line,
// dependencies first, as the build wrote it) and returns the names for
// which want is true, in list order.
func ReadModuleList(list string, want func(name string) bool) ([]string, error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range strings.Fields(string(b)) {
		if want(name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// ProbeConcurrently calls probe for each name, starting them in order, at
// most parallel at a time (a probe that finds a dependency loading
// elsewhere waits for it; one that must load it itself does so inside
// its turn). The results are in the order of names.
func ProbeConcurrently(names []string, parallel int, probe func(name string) error) []ModuleResult {
	parallel = max(parallel, 1)
	res := make([]ModuleResult, len(names))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, name := range names {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			start := time.Now()
			err := probe(name)
			res[i] = ModuleResult{Name: name, Took: time.Since(start)}
			if err != nil {
				res[i].Err = fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	wg.Wait()
	return res
}

// ModuleSummary says how a stage went in one line: how many modules are
// in, how long it took and which probe took longest (dependencies
// included).
func ModuleSummary(res []ModuleResult, took time.Duration) (string, []error) {
	n := 0
	var slow ModuleResult
	var errs []error
	for _, r := range res {
		if r.Err != nil {
			errs = append(errs, r.Err)
			continue
		}
		n++
		if r.Took > slow.Took {
			slow = r
		}
	}
	s := fmt.Sprintf("%d modules loaded in %v", n, took.Round(time.Millisecond))
	if slow.Name != "" {
		s += fmt.Sprintf(" (slowest %s %v)", slow.Name, slow.Took.Round(time.Millisecond))
	}
	return s, errs
}

// errNoProber is a stage's error when the prober could not be made.
var errNoProber = errors.New("no module prober")
