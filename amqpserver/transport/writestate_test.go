package transport

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func init() {
	// Every connection of every test verifies the write state's
	// invariants at each transition; benchmarks, and the server processes
	// they start, measure the code without the checks.
	checkWriteState = os.Getenv(benchServerEnv) == ""
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "-test.bench="); ok && v != "" {
			checkWriteState = false
		}
	}
}

// wsHarness drives one connection's writeState through named steps. c is
// a bare Conn: the key under which a Burst holds the wake, and the owner
// of the wake channel Burst.Close signals through flushBurst.
type wsHarness struct {
	c *Conn
	b *Burst
}

func newWSHarness() *wsHarness {
	return &wsHarness{c: &Conn{wake: make(chan struct{}, 1)}, b: NewBurst()}
}

// step applies one transition and describes its result.
func (h *wsHarness) step(op string) (res string) {
	w := &h.c.writeState
	defer func() {
		if r := recover(); r != nil {
			res = "panic"
		}
	}()
	switch op {
	case "wake", "wake in burst":
		if op == "wake in burst" {
			w.enterBurst(h.b)
			defer w.leaveBurst()
		}
		if w.routeWake(h.c) {
			return "signal"
		}
		return "deferred"
	case "enter twice":
		w.enterBurst(h.b)
		defer w.leaveBurst()
		w.enterBurst(h.b)
		return "ok"
	case "open":
		h.b.Open()
		return "ok"
	case "close":
		// The real Close: flushBurst finds no raw socket, so a wake it
		// takes goes to wakeWriter.
		held := w.wakeHeld
		h.b.Close()
		switch {
		case len(h.c.wake) == 1:
			<-h.c.wake
			return "signal"
		case w.wakeHeld && !held:
			return "deferred"
		}
		return "none"
	case "held":
		h.b.mu.Lock()
		defer h.b.mu.Unlock()
		return fmt.Sprint(len(h.b.held))
	case "take", "take ready":
		return actionName(w.takeBurstWake(op == "take ready"))
	case "spell":
		w.startSpell()
		return "ok"
	case "end spell", "end spell ready":
		return actionName(w.endSpell(op == "end spell ready"))
	case "begin":
		if w.beginWrite() {
			return "ok"
		}
		return "refused"
	case "end":
		w.endWrite()
		return "ok"
	case "gone":
		w.writerGone()
		return "ok"
	case "await":
		w.awaitDrain()
		return "ok"
	case "drained":
		return fmt.Sprint(w.drained())
	}
	panic("unknown step " + op)
}

func actionName(a wakeAction) string {
	return [...]string{wakeNone: "none", wakeRoute: "route", wakeInline: "inline"}[a]
}

// The transitions of the write state, step by step: each line is a step
// and the result it must have. A broken invariant changes a result.
func TestWriteStateSequences(t *testing.T) {
	tests := []struct {
		name  string
		steps []string // "op -> result"
	}{
		{"one write at a time", []string{
			"begin -> ok",
			"begin -> refused", // invariant 1: the writer backs off
			"spell -> ok",
			"wake -> deferred",
			"end spell ready -> route", // not inline: a write is under way
			"open -> ok",
			"wake in burst -> deferred",
			"take ready -> route", // nor for a burst
			"end -> ok",
			"end -> panic", // nothing to end
			"begin -> ok",
			"end -> ok",
		}},
		{"a spell delivers its wakes once", []string{
			"wake -> signal", // no spell: at once
			"spell -> ok",
			"wake -> deferred",
			"wake -> deferred",
			"wake -> deferred",
			"end spell ready -> inline", // the reader takes the socket
			"begin -> refused",
			"end -> ok",
			"end spell ready -> none", // delivered already
		}},
		{"the writer may write during a spell; the spell's wake then routes", []string{
			"spell -> ok",
			"wake -> deferred",
			"begin -> ok",
			"end spell ready -> route",
			"end -> ok",
		}},
		{"a spell's wake with nothing to write goes to the writer", []string{
			"spell -> ok",
			"wake -> deferred",
			"end spell -> route",
			"wake -> signal",
		}},
		{"a burst holds the wake once and its Close delivers it once", []string{
			"open -> ok",
			"wake in burst -> deferred",
			"wake in burst -> deferred",
			"held -> 1",
			"take ready -> inline",
			"begin -> refused",
			"end -> ok",
			"take ready -> none",
			"wake in burst -> deferred", // the run is still open
			"close -> signal",           // no raw socket: the writer writes
			"wake in burst -> signal",   // no run open any more
		}},
		{"a burst with no run open wakes at once", []string{
			"wake in burst -> signal",
			"held -> 0",
			"take ready -> none",
		}},
		{"output outside the burst is not held by it", []string{
			"open -> ok",
			"wake in burst -> deferred",
			"wake -> signal",
			"close -> signal",
		}},
		{"a burst about to write leaves the spell's wake to the writer", []string{
			"open -> ok",
			"spell -> ok",
			"wake in burst -> deferred",
			"wake -> deferred",
			"end spell ready -> route",
			"close -> signal",
			"take ready -> none",
		}},
		{"a burst closing during a spell defers to the spell", []string{
			"open -> ok",
			"wake in burst -> deferred",
			"spell -> ok",
			"close -> deferred", // invariant 3: no inline write in a spell
			"end spell ready -> inline",
			"end -> ok",
		}},
		{"nothing is written after the writer is gone", []string{
			"begin -> ok",
			"gone -> panic", // never during its own write
			"end -> ok",
			"gone -> ok",
			"begin -> refused",
			"spell -> ok",
			"wake -> deferred",
			"end spell ready -> route",
			"open -> ok",
			"wake in burst -> deferred",
			"take ready -> route",
		}},
		{"the reader waits until output drains or the writer goes", []string{
			"await -> ok",
			"drained -> true",
			"drained -> false", // once
			"await -> ok",
			"gone -> ok",
			"drained -> false", // gone woke it already
		}},
		{"burst output does not nest", []string{
			"enter twice -> panic",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newWSHarness()
			for i, s := range tt.steps {
				op, want, _ := strings.Cut(s, " -> ")
				if got := h.step(op); got != want {
					t.Fatalf("step %d %q: got %s, want %s", i, op, got, want)
				}
				if err := h.c.writeState.check(); err != nil {
					t.Fatalf("step %d %q: %v", i, op, err)
				}
			}
		})
	}
}

// check catches each broken invariant.
func TestWriteStateCheck(t *testing.T) {
	for _, w := range []writeState{
		{wakeHeld: true},
		{outWaiting: true, readerBusy: true},
		{outWaiting: true, wakeHeld: true, readerBusy: true},
		{outWaiting: true, writerDead: true},
		{writing: true, writerDead: true},
	} {
		if w.check() == nil {
			t.Errorf("%+v passes check", w)
		}
	}
	for _, w := range []writeState{
		{},
		{writing: true, readerBusy: true, wakeHeld: true, burstWake: true},
		{writerDead: true, readerBusy: true, wakeHeld: true},
		{outWaiting: true, writing: true, burstWake: true},
	} {
		if err := w.check(); err != nil {
			t.Errorf("%+v: %v", w, err)
		}
	}
}

// Random interleavings of the writer, the reader, producers and bursts
// against a model of what each owes: at most one write at a time, every
// deferred wake delivered exactly once, no write after the writer is gone.
func TestWriteStateModel(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		c := &Conn{}
		b := NewBurst()
		w := &c.writeState
		var (
			holder     string // who holds the socket: "", "writer", "inline"
			inSpell    bool
			readerOwed bool // a wake was deferred to this spell
			burstOwed  bool // a wake was deferred to the burst
			runs       int
			gone       bool
			waiting    bool
		)
		fail := func(i int, format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d step %d: "+format, append([]any{seed, i}, args...)...)
		}
		for i := range 400 {
			ready := rng.IntN(2) == 0
			switch rng.IntN(9) {
			case 0: // the writer takes the socket or gives it back
				switch {
				case holder == "writer":
					w.endWrite()
					holder = ""
				case w.beginWrite():
					if holder != "" || gone {
						fail(i, "writer took the socket from %q (gone %v)", holder, gone)
					}
					holder = "writer"
				case holder == "" && !gone:
					fail(i, "writer refused a free socket")
				}
			case 1: // an inline writer finishes
				if holder == "inline" {
					w.endWrite()
					holder = ""
				}
			case 2, 3: // a producer queues output, inside a burst or not
				inBurst := rng.IntN(2) == 0
				toBurst := inBurst && (burstOwed || runs > 0)
				toReader := !toBurst && inSpell
				if inBurst {
					w.enterBurst(b)
				}
				signal := w.routeWake(c)
				w.leaveBurst()
				if signal != (!toBurst && !toReader) {
					fail(i, "wake signalled %v (burst %v, spell %v)", signal, toBurst, toReader)
				}
				burstOwed = burstOwed || toBurst
				readerOwed = readerOwed || toReader
			case 4: // a run opens or closes; a Close takes the held wake
				if runs == 0 || rng.IntN(2) == 0 {
					b.mu.Lock()
					b.depth++
					b.mu.Unlock()
					runs++
					break
				}
				b.mu.Lock()
				b.depth--
				b.held = b.held[:0]
				b.mu.Unlock()
				runs--
				a := w.takeBurstWake(ready)
				if (a != wakeNone) != burstOwed {
					fail(i, "burst Close delivered %s, owed %v", actionName(a), burstOwed)
				}
				burstOwed = false
				if a == wakeRoute {
					// Conn.wakeWriter routes it again: to the spell, if on.
					if w.routeWake(c) == inSpell {
						fail(i, "a burst's wake routed wrongly, spell %v", inSpell)
					}
					readerOwed = readerOwed || inSpell
				}
				if a == wakeInline {
					if holder != "" || gone || inSpell || !ready {
						fail(i, "burst wrote inline: holder %q, gone %v, spell %v, ready %v", holder, gone, inSpell, ready)
					}
					holder = "inline"
				}
			case 5, 6: // the reader starts or ends a spell
				if !inSpell && !waiting {
					w.startSpell()
					inSpell = true
					break
				}
				if !inSpell {
					break
				}
				a := w.endSpell(ready)
				inSpell = false
				if (a != wakeNone) != readerOwed {
					fail(i, "spell end delivered %s, owed %v", actionName(a), readerOwed)
				}
				readerOwed = false
				if a == wakeRoute && !w.routeWake(c) {
					fail(i, "a spell's released wake did not signal the writer")
				}
				if a == wakeInline {
					if holder != "" || gone || burstOwed || !ready {
						fail(i, "reader wrote inline: holder %q, gone %v, burst owed %v, ready %v", holder, gone, burstOwed, ready)
					}
					holder = "inline"
				}
			case 7: // the reader waits for output to drain, or is woken
				switch {
				case waiting:
					if !w.drained() {
						fail(i, "a waiting reader was not reported")
					}
					waiting = false
				case !inSpell && !gone:
					w.awaitDrain()
					waiting = true
				}
			case 8: // the writer exits, rarely
				if holder == "" && !gone && rng.IntN(10) == 0 {
					w.writerGone()
					gone, waiting = true, false
				}
			}
			if err := w.check(); err != nil {
				fail(i, "%v", err)
			}
			if w.writing != (holder != "") {
				fail(i, "writing %v with holder %q", w.writing, holder)
			}
		}
	}
}

// Only writestate.go assigns the write state's fields: the decisions
// stay in its transitions.
func TestWriteStateFieldsOwned(t *testing.T) {
	fset := token.NewFileSet()
	own, err := parser.ParseFile(fset, "writestate.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]bool{}
	ast.Inspect(own, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "writeState" {
			for _, f := range ts.Type.(*ast.StructType).Fields.List {
				for _, name := range f.Names {
					fields[name.Name] = true
				}
			}
		}
		return true
	})
	if len(fields) == 0 {
		t.Fatal("no writeState fields found")
	}
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		if name == "writestate.go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		assigned := func(e ast.Expr) {
			if s, ok := e.(*ast.SelectorExpr); ok && fields[s.Sel.Name] {
				t.Errorf("%s: %s assigned outside writestate.go", fset.Position(s.Pos()), s.Sel.Name)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, e := range n.Lhs {
					assigned(e)
				}
			case *ast.IncDecStmt:
				assigned(n.X)
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					assigned(n.X)
				}
			}
			return true
		})
	}
}
