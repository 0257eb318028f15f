package frames

import (
	"reflect"
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

// full returns one value of every composite with every field set to a
// non-default value, so a round trip exercises each position.
func full() []Performative {
	caps := []encoding.Symbol{"com.microsoft:session-filter", "x"}
	props := encoding.Map{{Key: encoding.Symbol("com.microsoft:timeout"), Value: uint32(60000)}}
	info := encoding.Map{{Key: encoding.Symbol("DeadLetterReason"), Value: "r"}}
	return []Performative{
		&Open{ContainerID: "c", Hostname: "h", MaxFrameSize: Some[uint32](0), ChannelMax: Some[uint16](0),
			IdleTimeout: 1, OutgoingLocales: []encoding.Symbol{"en-US"}, IncomingLocales: []encoding.Symbol{"de"},
			OfferedCapabilities: caps, DesiredCapabilities: caps, Properties: props},
		&Begin{RemoteChannel: Some[uint16](3), NextOutgoingID: 1, IncomingWindow: 5000, OutgoingWindow: 5000,
			HandleMax: Some[uint32](255), OfferedCapabilities: caps, DesiredCapabilities: caps, Properties: props},
		&Attach{Name: "l", Handle: 7, Role: RoleReceiver,
			SndSettleMode: Some(SenderSettleUnsettled), RcvSettleMode: Some(ReceiverSettleSecond),
			Source: &Source{Address: "q", Durable: DurabilityUnsettledState, ExpiryPolicy: ExpiryNever, Timeout: 9,
				Dynamic: true, DynamicNodeProperties: props, DistributionMode: "move",
				Filter: encoding.Map{
					{Key: encoding.Symbol("com.microsoft:session-filter"), Value: encoding.Described{Descriptor: uint64(0x000000137000000C), Value: "s1"}},
					{Key: encoding.Symbol("js"), Value: "plain"},
					{Key: encoding.Symbol("next"), Value: nil},
				},
				DefaultOutcome: &Modified{DeliveryFailed: true}, Outcomes: []encoding.Symbol{"amqp:accepted:list"}, Capabilities: caps},
			Target:              &Target{Address: "t", Durable: 1, ExpiryPolicy: ExpiryLinkDetach, Timeout: 2, Dynamic: true, DynamicNodeProperties: props, Capabilities: caps},
			Unsettled:           encoding.Map{{Key: []byte{1}, Value: encoding.Described{Descriptor: uint64(0x24), Value: encoding.List{}}}},
			IncompleteUnsettled: true, InitialDeliveryCount: Some[uint32](0), MaxMessageSize: Some[uint64](0),
			OfferedCapabilities: caps, DesiredCapabilities: caps, Properties: props},
		&Attach{Name: "txn", Handle: 0, Role: RoleSender, Coordinator: &Coordinator{Capabilities: []encoding.Symbol{"amqp:local-transactions"}}},
		&Flow{NextIncomingID: Some[uint32](0), IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3,
			Handle: Some[uint32](0), DeliveryCount: Some[uint32](0), LinkCredit: Some[uint32](0), Available: Some[uint32](0),
			Drain: true, Echo: true, Properties: encoding.Map{{Key: encoding.Symbol("txn-id"), Value: []byte{1}}}},
		&Transfer{Handle: 1, DeliveryID: Some[uint32](0), DeliveryTag: []byte{}, MessageFormat: Some(MessageFormatBatch),
			Settled: true, More: true, RcvSettleMode: Some(ReceiverSettleFirst),
			State: &TransactionalState{TxnID: []byte{9}, Outcome: &Accepted{}}, Resume: true, Aborted: true, Batchable: true},
		&Disposition{Role: RoleSender, First: 1, Last: Some[uint32](1), Settled: true,
			State: &Rejected{Error: &Error{Condition: "com.microsoft:dead-letter", Description: "d", Info: info}}, Batchable: true},
		&Disposition{Role: RoleReceiver, First: 0, State: &Received{SectionNumber: 1, SectionOffset: 1 << 40}},
		&Disposition{Role: RoleReceiver, First: 0, State: &Released{}},
		&Disposition{Role: RoleReceiver, First: 0, State: &Modified{DeliveryFailed: true, UndeliverableHere: true, MessageAnnotations: info}},
		&Disposition{Role: RoleSender, First: 0, State: &Declared{TxnID: []byte("txn-1")}},
		&Detach{Handle: 3, Closed: true, Error: &Error{Condition: "amqp:link:stolen"}},
		&End{Error: &Error{Condition: "amqp:session:window-violation", Description: "x", Info: info}},
		&End{},
		&Close{Error: &Error{Condition: "amqp:connection:forced"}},
		&SASLMechanisms{Mechanisms: []encoding.Symbol{"MSSBCBS"}},
		&SASLInit{Mechanism: "ANONYMOUS", InitialResponse: []byte{}, Hostname: "host"},
		&SASLChallenge{Challenge: []byte("c")},
		&SASLResponse{Response: []byte("r")},
		&SASLOutcome{Code: SASLSysTemp, AdditionalData: []byte("a")},
	}
}

func TestPerformativesRoundTrip(t *testing.T) {
	for _, p := range full() {
		enc := p.AppendTo(nil)
		got, payload, err := ParseBody(append(enc, 0xab))
		if err != nil {
			t.Errorf("%T: %v\n% x", p, err, enc)
			continue
		}
		if len(payload) != 1 || payload[0] != 0xab {
			t.Errorf("%T: payload % x", p, payload)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("%T: round trip\n got %#v\nwant %#v", p, got, p)
		}
	}
}

func TestNestedTypesRoundTrip(t *testing.T) {
	nested := []Performative{
		&Error{Condition: "amqp:not-found", Description: "d", Info: encoding.Map{{Key: encoding.Symbol("k"), Value: int64(1)}}},
		&Source{Address: "a"}, &Target{}, &Coordinator{},
		&Received{}, &Accepted{}, &Rejected{}, &Released{}, &Modified{},
		&Declare{GlobalID: []byte{1}}, &Declare{}, &Discharge{TxnID: []byte{1}, Fail: true}, &Declared{TxnID: []byte{}},
		&TransactionalState{TxnID: []byte{1}},
	}
	for _, p := range nested {
		enc := p.AppendTo(nil)
		fresh := reflect.New(reflect.TypeOf(p).Elem()).Interface().(Performative)
		if err := fresh.Decode(enc); err != nil {
			t.Errorf("%T: %v", p, err)
			continue
		}
		if !reflect.DeepEqual(fresh, p) {
			t.Errorf("%T: got %#v, want %#v", p, fresh, p)
		}
		if fresh.Descriptor() != p.Descriptor() {
			t.Errorf("%T: descriptor", p)
		}
	}
}

// Decode must reset the struct: a reused Transfer must not keep fields of
// the previous frame.
func TestDecodeResetsReusedStruct(t *testing.T) {
	var tr Transfer
	first := &Transfer{Handle: 1, DeliveryID: Some[uint32](5), DeliveryTag: []byte{1}, MessageFormat: Some[uint32](0), More: true}
	if err := tr.Decode(first.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	cont := &Transfer{Handle: 1}
	if err := tr.Decode(cont.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&tr, cont) {
		t.Fatalf("got %#v", tr)
	}
}

func TestSymbolicDescriptors(t *testing.T) {
	// open("c") with the symbolic descriptor amqp:open:list.
	body := append([]byte{0x00, encoding.CodeSym8, 14}, "amqp:open:list"...)
	body = append(body, 0xc0, 0x04, 0x01, 0xa1, 0x01, 'c')
	p, _, err := ParseBody(body)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := p.(*Open); !ok || o.ContainerID != "c" {
		t.Fatalf("got %#v", p)
	}
	// A disposition whose state uses the symbolic accepted descriptor.
	body = hexbytes.Parse(t, "00 53 15 C0 16 05 41 43 40 41")
	body = append(body, 0x00, encoding.CodeSym8, 18)
	body = append(body, "amqp:accepted:list"...)
	body = append(body, encoding.CodeList0)
	body[4] = byte(len(body) - 5)
	p, _, err = ParseBody(body)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := p.(*Disposition); !ok || !reflect.DeepEqual(d.State, &Accepted{}) {
		t.Fatalf("got %#v", p)
	}
}

func TestUbyteFieldsUse0x50(t *testing.T) {
	a := &Attach{Name: "n", Role: RoleSender, SndSettleMode: Some(SenderSettleUnsettled), RcvSettleMode: Some(ReceiverSettleFirst)}
	want := "00 53 12 C0 0A 05 A1 01 6E 43 42 50 00 50 00"
	if got := hexbytes.Spaced(a.AppendTo(nil)); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if got := hexbytes.Spaced((&SASLOutcome{Code: SASLAuth}).AppendTo(nil)); got != "00 53 44 C0 03 01 50 01" {
		t.Fatalf("sasl-outcome: %s", got)
	}
}

func TestMultipleSymbolAcceptsSingleValue(t *testing.T) {
	// open("c", offered-capabilities = single symbol "x") in field 7.
	body := hexbytes.Parse(t, "00 53 10 C0 0D 08 A1 01 63 40 40 40 40 40 40 A3 01 78")
	var o Open
	if err := o.Decode(body); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.OfferedCapabilities, []encoding.Symbol{"x"}) {
		t.Fatalf("got %q", o.OfferedCapabilities)
	}
}

func TestDefaults(t *testing.T) {
	var o Open
	if err := o.Decode(hexbytes.Parse(t, "00 53 10 C0 03 01 A1 00")); err != nil {
		t.Fatal(err)
	}
	if o.FrameSizeLimit() != 4294967295 || o.ChannelLimit() != 65535 || o.MaxFrameSize.Present {
		t.Fatalf("open defaults: %+v", o)
	}
	var b Begin
	if err := b.Decode((&Begin{NextOutgoingID: 1, IncomingWindow: 2, OutgoingWindow: 3}).AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if b.HandleLimit() != 4294967295 || b.RemoteChannel.Present {
		t.Fatalf("begin defaults: %+v", b)
	}
	d := Disposition{First: 4}
	if d.LastID() != 4 {
		t.Fatal("last defaults to first")
	}
	d.Last = Some[uint32](9)
	if d.LastID() != 9 {
		t.Fatal("last")
	}
}

// A Service Bus session filter arrives described (Go SDK) or plain (JS
// SDK); the attach reply must carry it back in the same form.
func TestSessionFilterEchoedAsReceived(t *testing.T) {
	key := encoding.Symbol("com.microsoft:session-filter")
	// source{address "q", filter {key: described(0x000000137000000C, "s1")}}
	// written the way go-amqp writes it: full 8-byte ulong descriptor.
	described := append([]byte{0x00, encoding.CodeUlong, 0, 0, 0, 0x13, 0x70, 0, 0, 0x0c}, encoding.AppendString(nil, "s1")...)
	for _, value := range [][]byte{described, encoding.AppendString(nil, "s1"), {encoding.CodeNull}} {
		filter, start := encoding.BeginMap(nil)
		filter = encoding.AppendSymbol(filter, key)
		filter = append(filter, value...)
		filter = encoding.EndMap(filter, start, 1)
		src := encoding.AppendDescriptor(nil, CodeSource)
		src, ls := encoding.BeginList(src)
		src = encoding.AppendString(src, "q")
		for range 6 {
			src = encoding.AppendNull(src)
		}
		src = append(src, filter...)
		src = encoding.EndList(src, ls, 8)

		var s Source
		if err := s.Decode(src); err != nil {
			t.Fatal(err)
		}
		echoed := s.AppendTo(nil)
		if string(echoed) != string(src) {
			t.Errorf("echo differs:\n%s\n%s", hexbytes.Spaced(echoed), hexbytes.Spaced(src))
		}
		got, _ := s.Filter.Get(string(key))
		switch value[0] {
		case 0x00:
			if d, ok := got.(encoding.Described); !ok || d.Descriptor != uint64(0x137000000C) || d.Value != "s1" {
				t.Errorf("described filter decoded as %#v", got)
			}
		case encoding.CodeNull:
			if got != nil {
				t.Errorf("null filter decoded as %#v", got)
			}
		default:
			if got != "s1" {
				t.Errorf("plain filter decoded as %#v", got)
			}
		}
	}
}

// The per-message performatives decode into reused structs without
// allocating, as long as they carry no dynamic maps.
func TestHotDecodingDoesNotAllocate(t *testing.T) {
	transfer := (&Transfer{Handle: 1, DeliveryID: Some[uint32](7), DeliveryTag: make([]byte, 8), MessageFormat: Some[uint32](0), Settled: true}).AppendTo(nil)
	flow := (&Flow{NextIncomingID: Some[uint32](1), IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000, Handle: Some[uint32](0), DeliveryCount: Some[uint32](0), LinkCredit: Some[uint32](100), Drain: true}).AppendTo(nil)
	disposition := (&Disposition{Role: RoleReceiver, First: 1, Last: Some[uint32](9), Settled: true, State: &Accepted{}}).AppendTo(nil)
	var tr Transfer
	var fl Flow
	var d Disposition
	allocs := testing.AllocsPerRun(100, func() {
		if tr.Decode(transfer) != nil || fl.Decode(flow) != nil || d.Decode(disposition) != nil {
			panic("decode failed")
		}
		if _, _, _, err := SplitBody(transfer); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("decoding allocated %.1f times", allocs)
	}
	if d.LastID() != 9 || !fl.Drain || tr.DeliveryID.Value != 7 {
		t.Fatal("decoded wrong values")
	}
}
