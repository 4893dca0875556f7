//go:build js && wasm

package main

import (
	"encoding/json"
	"syscall/js"
	"time"
)

// main exports WasmCascade to JavaScript, calls globalThis.onEocReady when it is there, and
// stays up to serve calls:
//
//	const cascade = new WasmCascade();
//	const r = await cascade.resolve("What is eoc-proxy?"); // {stage, payload, joules, grade, receipt, ...}
func main() {
	global := js.Global()
	b, err := newBrowserCascade(clockTick(250 * time.Millisecond))
	if err != nil {
		global.Get("console").Call("error", "eoc-wasm: "+err.Error())
		if f := global.Get("onEocReady"); f.Type() == js.TypeFunction {
			f.Invoke(err.Error())
		}
		return
	}
	resolve := js.FuncOf(func(_ js.Value, args []js.Value) any {
		question := ""
		if len(args) > 0 && args[0].Type() == js.TypeString {
			question = args[0].String()
		}
		// A Promise, the walk on a goroutine of its own: a call from JavaScript must not block
		// the event loop. The Promise runs its executor at once, inside New, so the executor is
		// released right after: each call's would otherwise stay in Go's table of functions.
		executor := js.FuncOf(func(_ js.Value, p []js.Value) any {
			ok := p[0]
			go func() {
				out, _ := json.Marshal(b.resolve(question)) // plain strings and numbers: cannot fail
				ok.Invoke(global.Get("JSON").Call("parse", string(out)))
			}()
			return nil
		})
		promise := global.Get("Promise").New(executor)
		executor.Release()
		return promise
	})
	// new WasmCascade() returns an object with resolve: one cascade per page, shared.
	global.Set("WasmCascade", js.FuncOf(func(js.Value, []js.Value) any {
		return js.ValueOf(map[string]any{"resolve": resolve})
	}))
	if f := global.Get("onEocReady"); f.Type() == js.TypeFunction {
		f.Invoke()
	}
	select {}
}
