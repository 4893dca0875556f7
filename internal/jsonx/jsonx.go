// Package jsonx decodes JSON as encoding/json does, faster, for the request path's decodes: a
// client's request body and a backend's answer.
//
// Unmarshal decodes with go-json-experiment/json's v1 package: encoding/json's API and
// semantics implemented on the v2 decoder, what encoding/json becomes under GOEXPERIMENT=jsonv2.
// It allocates less and takes less time than encoding/json on a chat request and an Ollama
// answer (proxy's BenchmarkDecodeRequest, backends' BenchmarkOllamaDecode). Input it refuses is
// decoded again by encoding/json, from the zero value, so a refusal carries encoding/json's
// error (the field, the offset) and input only encoding/json accepts is still decoded.
// Agrees reports any difference; the proxy's and the backends' fuzzers call it.
package jsonx

import (
	"encoding/json"
	"fmt"
	"reflect"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Unmarshal is json.Unmarshal; v must be a non-nil pointer.
func Unmarshal(data []byte, v any) error {
	if jsonv1.Unmarshal(data, v) == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero()
	return json.Unmarshal(data, v)
}

// Agrees decodes data into a T with encoding/json, with go-json-experiment/json's v1 package and
// with Unmarshal, and describes how they differ: in accepting data, or in the values decoded.
// It returns nil when they agree.
func Agrees[T any](data []byte) error {
	var std, fast, got T
	stdErr := json.Unmarshal(data, &std)
	fastErr := jsonv1.Unmarshal(data, &fast)
	gotErr := Unmarshal(data, &got)
	switch {
	case (stdErr == nil) != (fastErr == nil):
		return fmt.Errorf("%T from %q: encoding/json says %w, jsonv1 says %w", std, data, stdErr, fastErr)
	case (stdErr == nil) != (gotErr == nil) || stdErr != nil && stdErr.Error() != gotErr.Error():
		return fmt.Errorf("%T from %q: encoding/json says %w, Unmarshal says %w", std, data, stdErr, gotErr)
	case stdErr == nil && !reflect.DeepEqual(std, fast):
		return fmt.Errorf("%T from %q:\nencoding/json %+v\njsonv1        %+v", std, data, std, fast)
	case stdErr == nil && !reflect.DeepEqual(std, got):
		return fmt.Errorf("%T from %q:\nencoding/json %+v\nUnmarshal     %+v", std, data, std, got)
	}
	return nil
}
