package message

import (
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// A response carries the request's message-id as its correlation-id, the
// status and description under both spellings, the condition only for a
// failure, and the body only when there is one.
func TestAppendResponse(t *testing.T) {
	for _, tc := range []struct {
		r        Response
		wantBody bool
	}{
		{Response{CorrelationID: StringID("req-1"), Status: 200, Description: "OK", Body: encoding.Map{{Key: "k", Value: int64(1)}}}, true},
		{Response{CorrelationID: ID{Kind: IDUlong, Ulong: 7}, Status: 410, Description: "gone", Condition: "com.microsoft:message-lock-lost"}, false},
	} {
		raw, err := AppendResponse(nil, &tc.r)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		props, err := s.ReadProperties()
		if err != nil || props.CorrelationID.Kind != tc.r.CorrelationID.Kind ||
			string(props.CorrelationID.Bytes) != string(tc.r.CorrelationID.Bytes) || props.CorrelationID.Ulong != tc.r.CorrelationID.Ulong {
			t.Fatalf("correlation-id %+v, want %+v (%v)", props.CorrelationID, tc.r.CorrelationID, err)
		}
		for key, want := range map[string]any{
			"statusCode": tc.r.Status, "status-code": tc.r.Status,
			"statusDescription": tc.r.Description, "status-description": tc.r.Description,
		} {
			v, ok, err := s.ApplicationProperty(key)
			if !ok || err != nil {
				t.Fatalf("%s missing (%v)", key, err)
			}
			r := encoding.NewReader(v)
			if got, err := r.ReadAny(encoding.Limits{}); err != nil || got != want {
				t.Fatalf("%s = %#v, want %#v (%v)", key, got, want, err)
			}
		}
		for _, key := range []string{"errorCondition", "error-condition"} {
			if _, ok, _ := s.ApplicationProperty(key); ok != (tc.r.Condition != "") {
				t.Fatalf("%s present %v with condition %q", key, ok, tc.r.Condition)
			}
		}
		if s.Body.Present() != tc.wantBody {
			t.Fatalf("body present %v, want %v", s.Body.Present(), tc.wantBody)
		}
	}
}
