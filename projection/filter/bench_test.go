package filter

import "testing"

// benchMessage is a typical order message: a few application properties
// and the system properties a sender sets.
func benchMessage() *Message {
	m := props("region", StringValue("emea"), "color", StringValue("red"), "quantity", IntValue(12),
		"customer", StringValue("c-1042"), "priority", IntValue(2))
	m.MessageID = StringValue("3f2a9c1e-7b7d-4c1e-9a51-1b2c3d4e5f60")
	m.Label = StringValue("order-created")
	m.ContentType = StringValue("application/json")
	m.SequenceNumber = IntValue(1 << 20)
	return m
}

func BenchmarkMatchSQL(b *testing.B) {
	f, err := CompileSQL("user.color = 'red' AND sys.Label LIKE 'order%' AND quantity > 10")
	if err != nil {
		b.Fatal(err)
	}
	benchMatch(b, f)
}

// BenchmarkMatchSQLGeneral uses a LIKE pattern without a fast path, IN and
// arithmetic.
func BenchmarkMatchSQLGeneral(b *testing.B) {
	f, err := CompileSQL("sys.Label LIKE 'or_er-%ed' AND region IN ('amer', 'apac', 'emea') AND quantity * 2 - priority >= 20")
	if err != nil {
		b.Fatal(err)
	}
	benchMatch(b, f)
}

func BenchmarkMatchCorrelation(b *testing.B) {
	label := "order-created"
	f, err := CompileCorrelation(Correlation{Subject: &label, Properties: map[string]Value{
		"color": StringValue("red"), "quantity": IntValue(12)}})
	if err != nil {
		b.Fatal(err)
	}
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := f.Match(m); !ok {
			b.Fatal("no match")
		}
	}
}

func BenchmarkCompileSQL(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileSQL("user.color = 'red' AND sys.Label LIKE 'order%' AND quantity > 10"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkApplyAction(b *testing.B) {
	a, err := CompileAction("SET quantity = quantity / 2; REMOVE priority; SET sys.CorrelationId = 'low'")
	if err != nil {
		b.Fatal(err)
	}
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Apply(m); err != nil {
			b.Fatal(err)
		}
	}
}

// benchMatch measures f on benchMessage, which f must match.
func benchMatch(b *testing.B, f Filter) {
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(m); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
