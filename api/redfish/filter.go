package redfish

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// $filter (DSP0266 "Query parameters": the filter subset of OData): a
// collection's members are kept when the expression holds for the member
// as its own GET shows it. The grammar is Redfish's, not all of OData's:
//
//	expr       = or
//	or         = and *("or" and)
//	and        = not *("and" not)
//	not        = "not" not / "(" expr ")" / comparison
//	comparison = operand ("eq" / "ne" / "gt" / "ge" / "lt" / "le") operand
//	operand    = property path ("Status/Health") / 'string' / number / true / false / null
//
// It is a few dozen lines of recursive descent: an OData library would
// bring functions, lambdas and types Redfish does not define, and we
// would still have to evaluate its tree against our JSON.

// Limits keep a hostile filter cheap to parse and evaluate.
const (
	maxFilterLen   = 1024
	maxFilterDepth = 32
)

// filter is a parsed $filter expression.
type filter struct {
	raw  string
	root filterNode
}

type filterNode interface {
	eval(obj any) bool
}

type (
	filterOr  struct{ l, r filterNode }
	filterAnd struct{ l, r filterNode }
	filterNot struct{ x filterNode }
	filterCmp struct {
		op   string
		l, r filterOperand
	}
	// filterOperand is a property path or a literal (path nil).
	filterOperand struct {
		path []string
		lit  any // string, float64, bool or nil
	}
)

func (n filterOr) eval(o any) bool  { return n.l.eval(o) || n.r.eval(o) }
func (n filterAnd) eval(o any) bool { return n.l.eval(o) && n.r.eval(o) }
func (n filterNot) eval(o any) bool { return !n.x.eval(o) }

func (op filterOperand) value(o any) any {
	if op.path == nil {
		return op.lit
	}
	v := o
	for _, p := range op.path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// eval compares like OData: eq/ne on any values (a missing property is
// null), the orderings only between two numbers or two strings; an
// ordering of anything else is false.
func (n filterCmp) eval(o any) bool {
	l, r := n.l.value(o), n.r.value(o)
	switch n.op {
	case "eq":
		return filterEqual(l, r)
	case "ne":
		return !filterEqual(l, r)
	}
	var c int
	switch lv := l.(type) {
	case float64:
		rv, ok := r.(float64)
		if !ok {
			return false
		}
		c = compareFloat(lv, rv)
	case string:
		rv, ok := r.(string)
		if !ok {
			return false
		}
		c = strings.Compare(lv, rv)
	default:
		return false
	}
	switch n.op {
	case "gt":
		return c > 0
	case "ge":
		return c >= 0
	case "lt":
		return c < 0
	default: // "le"
		return c <= 0
	}
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// filterEqual compares scalars; objects and arrays equal nothing (OData
// compares primitive values only).
func filterEqual(a, b any) bool {
	switch a.(type) {
	case map[string]any, []any:
		return false
	}
	switch b.(type) {
	case map[string]any, []any:
		return false
	}
	return a == b
}

// match reports whether the member v (any JSON-marshalable value)
// satisfies the filter.
func (f *filter) match(v any) (bool, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	var o any
	if err := json.Unmarshal(b, &o); err != nil {
		return false, err
	}
	return f.root.eval(o), nil
}

var errFilterSyntax = errors.New("filter syntax")

// parseFilter parses a $filter value.
func parseFilter(s string) (*filter, error) {
	if len(s) > maxFilterLen {
		return nil, fmt.Errorf("%w: longer than %d bytes", errFilterSyntax, maxFilterLen)
	}
	toks, err := lexFilter(s)
	if err != nil {
		return nil, err
	}
	p := &filterParser{toks: toks}
	root, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.i != len(p.toks) {
		return nil, fmt.Errorf("%w: unexpected %q", errFilterSyntax, p.toks[p.i].text)
	}
	return &filter{raw: s, root: root}, nil
}

type filterTokKind int

const (
	tokWord   filterTokKind = iota // keyword, operator or property path
	tokString                      // 'quoted'
	tokNumber
	tokOpen
	tokClose
)

type filterTok struct {
	kind filterTokKind
	text string // a string literal's text is unquoted
}

func lexFilter(s string) ([]filterTok, error) {
	var toks []filterTok
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case c == '(':
			toks = append(toks, filterTok{kind: tokOpen, text: "("})
			i++
		case c == ')':
			toks = append(toks, filterTok{kind: tokClose, text: ")"})
			i++
		case c == '\'':
			// '' inside a string is a quote (OData).
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, fmt.Errorf("%w: unterminated string", errFilterSyntax)
				}
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						b.WriteByte('\'')
						j += 2
						continue
					}
					break
				}
				b.WriteByte(s[j])
				j++
			}
			toks = append(toks, filterTok{kind: tokString, text: b.String()})
			i = j + 1
		case c == '-' || c >= '0' && c <= '9':
			j := i + 1
			for j < len(s) && strings.IndexByte("0123456789.eE+-", s[j]) >= 0 {
				j++
			}
			toks = append(toks, filterTok{kind: tokNumber, text: s[i:j]})
			i = j
		case isFilterWordByte(c):
			j := i
			for j < len(s) && isFilterWordByte(s[j]) {
				j++
			}
			toks = append(toks, filterTok{kind: tokWord, text: s[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("%w: unexpected character %q", errFilterSyntax, c)
		}
	}
	return toks, nil
}

func isFilterWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '/' || c == '@' || c == '.' || c == '#'
}

type filterParser struct {
	toks []filterTok
	i    int
}

func (p *filterParser) peekWord(w string) bool {
	return p.i < len(p.toks) && p.toks[p.i].kind == tokWord && p.toks[p.i].text == w
}

func (p *filterParser) or(depth int) (filterNode, error) {
	l, err := p.and(depth)
	if err != nil {
		return nil, err
	}
	for p.peekWord("or") {
		p.i++
		r, err := p.and(depth)
		if err != nil {
			return nil, err
		}
		l = filterOr{l, r}
	}
	return l, nil
}

func (p *filterParser) and(depth int) (filterNode, error) {
	l, err := p.not(depth)
	if err != nil {
		return nil, err
	}
	for p.peekWord("and") {
		p.i++
		r, err := p.not(depth)
		if err != nil {
			return nil, err
		}
		l = filterAnd{l, r}
	}
	return l, nil
}

func (p *filterParser) not(depth int) (filterNode, error) {
	if depth > maxFilterDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errFilterSyntax, maxFilterDepth)
	}
	if p.peekWord("not") {
		p.i++
		x, err := p.not(depth + 1)
		if err != nil {
			return nil, err
		}
		return filterNot{x}, nil
	}
	if p.i < len(p.toks) && p.toks[p.i].kind == tokOpen {
		p.i++
		x, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.i >= len(p.toks) || p.toks[p.i].kind != tokClose {
			return nil, fmt.Errorf("%w: missing )", errFilterSyntax)
		}
		p.i++
		return x, nil
	}
	return p.comparison()
}

func (p *filterParser) comparison() (filterNode, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	if p.i >= len(p.toks) || p.toks[p.i].kind != tokWord {
		return nil, fmt.Errorf("%w: want a comparison operator", errFilterSyntax)
	}
	op := p.toks[p.i].text
	switch op {
	case "eq", "ne", "gt", "ge", "lt", "le":
	default:
		return nil, fmt.Errorf("%w: %q is not a comparison operator", errFilterSyntax, op)
	}
	p.i++
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	return filterCmp{op: op, l: l, r: r}, nil
}

func (p *filterParser) operand() (filterOperand, error) {
	if p.i >= len(p.toks) {
		return filterOperand{}, fmt.Errorf("%w: expression ends early", errFilterSyntax)
	}
	t := p.toks[p.i]
	p.i++
	switch t.kind {
	case tokString:
		return filterOperand{lit: t.text}, nil
	case tokNumber:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return filterOperand{}, fmt.Errorf("%w: bad number %q", errFilterSyntax, t.text)
		}
		return filterOperand{lit: f}, nil
	case tokWord:
		switch t.text {
		case "true":
			return filterOperand{lit: true}, nil
		case "false":
			return filterOperand{lit: false}, nil
		case "null":
			return filterOperand{lit: nil}, nil
		case "and", "or", "not", "eq", "ne", "gt", "ge", "lt", "le":
			return filterOperand{}, fmt.Errorf("%w: operator %q where a value belongs", errFilterSyntax, t.text)
		}
		path := strings.Split(t.text, "/")
		for _, seg := range path {
			if seg == "" {
				return filterOperand{}, fmt.Errorf("%w: bad property path %q", errFilterSyntax, t.text)
			}
		}
		return filterOperand{path: path}, nil
	}
	return filterOperand{}, fmt.Errorf("%w: unexpected %q", errFilterSyntax, t.text)
}
