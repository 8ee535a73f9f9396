package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Module is one kernel module to load: its name, its file and the modules
// it needs first.
type Module struct {
	Name string
	Path string
	Deps []string
}

// ModuleResult is how loading one module went. Err is nil for a module
// that loaded or was already there (Present).
type ModuleResult struct {
	Name    string
	Present bool
	Took    time.Duration
	Err     error
}

// errAlreadyLoaded is what a load function returns for a module the kernel
// already has.
var errAlreadyLoaded = errors.New("already loaded")

// moduleName is the kernel's name for a module file: dashes become
// underscores, the directory and ".ko" go.
func moduleName(path string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(path), ".ko"), "-", "_")
}

// ReadModules reads the image's load list (one module name per line,
// dependencies first, as the build wrote it) and dir/modules.dep, and
// returns the modules for which want is true, in list order, with their
// files under dir and their dependencies.
func ReadModules(list, dir string, want func(name string) bool) ([]Module, error) {
	b, err := os.ReadFile(list)
	if err != nil {
		return nil, err
	}
	dep, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	byName := map[string]Module{}
	for _, line := range strings.Split(string(dep), "\n") {
		p, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		m := Module{Name: moduleName(p), Path: filepath.Join(dir, p)}
		for _, d := range strings.Fields(rest) {
			m.Deps = append(m.Deps, moduleName(d))
		}
		byName[m.Name] = m
	}
	var mods []Module
	var errs []error
	for _, name := range strings.Fields(string(b)) {
		if !want(name) {
			continue
		}
		m, ok := byName[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not in modules.dep", name))
			continue
		}
		mods = append(mods, m)
	}
	return mods, errors.Join(errs...)
}

// LoadConcurrently loads mods with load, each as soon as the modules it
// depends on among mods have loaded (dependencies outside mods must be
// loaded already), at most parallel at a time: the kernel links and
// initialises independent modules side by side, and under emulation a
// module's load is mostly CPU. A module whose dependency failed is not
// tried. The results are in the order of mods.
func LoadConcurrently(mods []Module, parallel int, load func(Module) error) []ModuleResult {
	parallel = max(parallel, 1)
	res := make([]ModuleResult, len(mods))
	done := map[string]chan struct{}{}
	for _, m := range mods {
		done[m.Name] = make(chan struct{})
	}
	failed := make([]bool, len(mods))
	index := map[string]int{}
	for i, m := range mods {
		index[m.Name] = i
	}
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, m := range mods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[m.Name])
			res[i].Name = m.Name
			for _, d := range m.Deps {
				ch, ok := done[d]
				if !ok {
					continue
				}
				<-ch
				// failed[j] was written before done[d] closed.
				if failed[index[d]] {
					res[i].Err = fmt.Errorf("%s: needs %s, which did not load", m.Name, d)
					failed[i] = true
					return
				}
			}
			slots <- struct{}{}
			start := time.Now()
			err := load(m)
			res[i].Took = time.Since(start)
			<-slots
			switch {
			case err == nil:
			case errors.Is(err, errAlreadyLoaded):
				res[i].Present = true
			default:
				res[i].Err = fmt.Errorf("%s: %w", m.Name, err)
				failed[i] = true
			}
		}()
	}
	wg.Wait()
	return res
}

// ModuleSummary says how a load went in one line: how many modules
// loaded, how long it took and which one took longest.
func ModuleSummary(res []ModuleResult, took time.Duration) (string, []error) {
	n := 0
	var slow ModuleResult
	var errs []error
	for _, r := range res {
		if r.Err != nil {
			errs = append(errs, r.Err)
			continue
		}
		if !r.Present {
			n++
		}
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
