package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/internal/testenv/redistest"
	"github.com/eoc-proxy/eoc-proxy/proxy/dialect/responses"
)

var _ responses.Store = (*Responses)(nil)

func TestResponsesSharedAndScoped(t *testing.T) {
	srv := redistest.Start(t)
	a, b := open(t, srv.URL, "a").Responses(ResponsesOptions{}), open(t, srv.URL, "b").Responses(ResponsesOptions{})
	ctx := context.Background()
	if err := a.Put(ctx, "t1", "resp_1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := b.Get(ctx, "t1", "resp_1"); err != nil || !ok || string(got) != `{"v":1}` {
		t.Fatalf("replica b: %q %v %v", got, ok, err)
	}
	for _, tenant := range []string{"t2", "", "t1:resp_1", "t"} {
		if _, ok, err := b.Get(ctx, tenant, "resp_1"); ok || err != nil {
			t.Errorf("tenant %q read t1's entry (%v)", tenant, err)
		}
		if found, err := b.Delete(ctx, tenant, "resp_1"); found || err != nil {
			t.Errorf("tenant %q deleted t1's entry (%v)", tenant, err)
		}
	}
	if _, ok, _ := b.Get(ctx, "t1", "resp_2"); ok {
		t.Error("an unknown id was found")
	}
	if found, err := b.Delete(ctx, "t1", "resp_1"); !found || err != nil {
		t.Fatalf("delete: %v %v", found, err)
	}
	if _, ok, _ := a.Get(ctx, "t1", "resp_1"); ok {
		t.Error("found after delete")
	}
}

func TestResponsesBounds(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, srv.URL, "a")
	s := c.Responses(ResponsesOptions{TenantEntries: 3, MaxValue: 64, TTL: time.Hour})
	ctx := context.Background()
	for i := range 5 {
		if err := s.Put(ctx, "t1", fmt.Sprintf("resp_%02d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, "t2", "resp_00", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		_, ok, err := s.Get(ctx, "t1", fmt.Sprintf("resp_%02d", i))
		if err != nil || ok != (i >= 2) {
			t.Errorf("entry %d kept %v (%v): the oldest go first, 3 stay", i, ok, err)
		}
	}
	if _, ok, _ := s.Get(ctx, "t2", "resp_00"); !ok {
		t.Error("t2's entry went for t1's bound")
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = rdb.Close() }()
	val, index := responseKeys("t1", "resp_04")
	for _, k := range []string{val, index} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: TTL %v, want in (0, 1h]", k, ttl)
		}
	}
	if n := rdb.ZCard(ctx, index).Val(); n != 3 {
		t.Errorf("index holds %d ids, want 3", n)
	}

	if err := s.Put(ctx, "t1", "resp_big", []byte(strings.Repeat("x", 65))); !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("Put of 65 bytes with MaxValue 64: %v", err)
	}
	// A value this store would not have written is read no further than the bound, and absent.
	big, _ := responseKeys("t1", "resp_planted")
	rdb.Set(ctx, big, strings.Repeat("x", 1000), time.Hour)
	if got, ok, err := s.Get(ctx, "t1", "resp_planted"); ok || err != nil {
		t.Errorf("an oversized value was read: %d bytes, %v", len(got), err)
	}
}

func TestResponsesExpire(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL, "a").Responses(ResponsesOptions{TTL: 50 * time.Millisecond})
	ctx := context.Background()
	if err := s.Put(ctx, "t1", "resp_1", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Redis expires the entry; the loop bounds a hang, it times nothing.
	for i := 0; ; i++ {
		if _, ok, _ := s.Get(ctx, "t1", "resp_1"); !ok {
			break
		}
		if i == 500 {
			t.Fatal("never expired")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestResponsesDown(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, srv.URL, "a")
	shared := c.Responses(ResponsesOptions{})
	layered := responses.Layered{Local: responses.NewMemory(responses.MemoryOptions{}), Shared: shared}
	ctx := context.Background()
	if err := layered.Put(ctx, "t1", "resp_1", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if _, _, err := shared.Get(ctx, "t1", "resp_1"); !errors.Is(err, ErrDown) {
		t.Errorf("Get with redis gone: %v", err)
	}
	if err := shared.Put(ctx, "t1", "resp_2", []byte("v")); !errors.Is(err, ErrDown) {
		t.Errorf("Put with redis gone: %v", err)
	}
	// The layered store goes on locally.
	if got, ok, err := layered.Get(ctx, "t1", "resp_1"); !ok || err != nil || string(got) != "v1" {
		t.Errorf("layered Get with redis gone: %q %v %v", got, ok, err)
	}
	if err := layered.Put(ctx, "t1", "resp_3", []byte("v3")); err != nil {
		t.Errorf("layered Put with redis gone: %v", err)
	}
	if _, ok, err := layered.Get(ctx, "t1", "resp_404"); ok || !errors.Is(err, ErrDown) {
		t.Errorf("layered Get of an unknown id with redis gone: %v %v (the shared store could not say)", ok, err)
	}
}

// A conversation stored through one replica's dialect continues through another's.
func TestResponsesContinueOnAnotherReplica(t *testing.T) {
	srv := redistest.Start(t)
	da := responses.New(responses.Options{Store: open(t, srv.URL, "a").Responses(ResponsesOptions{})})
	db := responses.New(responses.Options{Store: open(t, srv.URL, "b").Responses(ResponsesOptions{})})
	ctx := context.Background()
	x, e := da.Decode(ctx, "t1", []byte(`{"model":"m","input":"my name is Ada"}`))
	if e != nil {
		t.Fatal(e)
	}
	text := "Hello Ada."
	ans := &cascade.Answer{Model: "m", Choices: []cascade.Choice{{Message: cascade.AnswerMessage{Role: "assistant", Content: &text}, FinishReason: "stop"}}}
	whole, err := x.Whole(ans)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Done(ctx, ans); err != nil {
		t.Fatal(err)
	}
	var id struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(whole, &id); err != nil {
		t.Fatal(err)
	}
	y, e := db.Decode(ctx, "t1", []byte(`{"model":"m","previous_response_id":"`+id.ID+`","input":"what is my name?"}`))
	if e != nil {
		t.Fatalf("continuing on replica b: %v", e)
	}
	msgs := y.Chat().Messages
	if len(msgs) != 3 || msgs[0].Text() != "my name is Ada" || msgs[1].Text() != text || msgs[2].Text() != "what is my name?" {
		t.Errorf("replica b's conversation: %+v", msgs)
	}
	if got, e := db.Retrieve(ctx, "t1", id.ID); e != nil || string(got) != string(whole) {
		t.Errorf("retrieve on replica b: %v %s", e, got)
	}
	if _, e := db.Retrieve(ctx, "t2", id.ID); e == nil || e.Status != 404 {
		t.Errorf("another tenant on replica b: %v", e)
	}
}
