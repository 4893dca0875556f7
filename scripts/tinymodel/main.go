// Command tinymodel creates the eoc-tiny test models in the Ollama at $OLLAMA_HOST (default
// 127.0.0.1:11434), or only writes the model file.
//
// Usage:
//
//	OLLAMA_HOST=127.0.0.1:11434 go run ./scripts/tinymodel
//	go run ./scripts/tinymodel -o eoc-tiny.gguf   # only write the file
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/eoc-proxy/eoc-proxy/internal/testenv/tinymodel"
	"github.com/ollama/ollama/api"
)

func main() {
	out := flag.String("o", "", "write the chat model's GGUF to this file instead of creating the models in Ollama")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for Ollama to answer")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("tinymodel: ")

	if *out != "" {
		if err := tinymodel.WriteFile(*out, false); err != nil {
			log.Fatal(err)
		}
		fmt.Println(*out)
		return
	}

	c, err := api.ClientFromEnvironment()
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait+time.Minute)
	defer cancel()
	wctx, wcancel := context.WithTimeout(ctx, *wait)
	defer wcancel()
	if err := tinymodel.WaitReady(wctx, c); err != nil {
		log.Fatalf("Ollama at %s does not answer: %v", hostOrDefault(), err)
	}
	start := time.Now()
	if err := tinymodel.CreateAll(ctx, c); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("created %s and %s in %s at %s\n", tinymodel.ChatName, tinymodel.EmbedName, hostOrDefault(), time.Since(start).Round(time.Millisecond))
}

func hostOrDefault() string {
	if h := os.Getenv("OLLAMA_HOST"); h != "" {
		return h
	}
	return "127.0.0.1:11434"
}
