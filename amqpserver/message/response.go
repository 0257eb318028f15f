package message

import "github.com/walbus/walbus/amqpserver/encoding"

// Response is the reply of a request-response node, $cbs or $management
// (docs/compatibility.md §3 and §6).
type Response struct {
	CorrelationID ID // the request's message-id, same type
	Status        int32
	Description   string
	Condition     string // error condition, for failures; empty for none
	Body          any    // the amqp-value body; nil for none
}

// AppendResponse writes r as a message. Status, description and condition
// go out under both spellings (the Go SDK reads either; the JS SDK's
// management client reads only the camelCase ones), status as an AMQP int.
func AppendResponse(dst []byte, r *Response) ([]byte, error) {
	dst = AppendProperties(dst, &Properties{CorrelationID: r.CorrelationID})
	app := encoding.Map{
		{Key: "statusCode", Value: r.Status},
		{Key: "status-code", Value: r.Status},
		{Key: "statusDescription", Value: r.Description},
		{Key: "status-description", Value: r.Description},
	}
	if r.Condition != "" {
		app = append(app,
			encoding.MapEntry{Key: "errorCondition", Value: encoding.Symbol(r.Condition)},
			encoding.MapEntry{Key: "error-condition", Value: encoding.Symbol(r.Condition)})
	}
	dst = encoding.AppendDescriptor(dst, CodeApplicationProperties)
	dst, err := encoding.AppendAny(dst, app)
	if err != nil || r.Body == nil {
		return dst, err
	}
	dst = encoding.AppendDescriptor(dst, CodeAMQPValue)
	return encoding.AppendAny(dst, r.Body)
}
