package demo

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Completion sizes of the demo's language model.
const (
	// DefaultMaxTokens is the completion's length when the request gives
	// no max_tokens.
	DefaultMaxTokens = 16
	// answerTokens is how long the model likes to talk: a completion is
	// the shorter of this (plus the prompt's length) and max_tokens.
	answerTokens = 24
	// maxTokensCap bounds max_tokens.
	maxTokensCap = 128000
)

// tokenDelay spaces the events of a streamed completion, as a model that
// writes as it thinks.
const tokenDelay = 20 * time.Millisecond

// words are what the demo model says, over and over.
var words = strings.Fields("the school office thanks you for your question and will answer it " +
	"as soon as the notice board has been updated by the head teacher")

// chatRequest is the part of an OpenAI-style chat completion request the
// demo reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens *int `json:"max_tokens"`
	Stream    bool `json:"stream"`
}

// usage is the token count of a completion, as OpenAI's API reports it.
type usage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

// chat answers POST /v1/chat/completions like an OpenAI-style API: a
// completion whose tokens are words, with the usage field; with
// "stream": true, a Server-Sent Events stream of one event per token and
// a last event carrying the usage (as OpenAI's include_usage), then
// [DONE].
func (a *API) chat(w http.ResponseWriter, r *http.Request) {
	var in chatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": "want a JSON chat completion request"}})
		return
	}
	maxTokens := DefaultMaxTokens
	if in.MaxTokens != nil {
		if *in.MaxTokens < 1 || *in.MaxTokens > maxTokensCap {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{
				"message": fmt.Sprintf("max_tokens must be between 1 and %d", maxTokensCap)}})
			return
		}
		maxTokens = *in.MaxTokens
	}
	u := usage{}
	for _, m := range in.Messages {
		u.Prompt += 3 + len(strings.Fields(m.Content))
	}
	u.Completion = min(maxTokens, answerTokens+u.Prompt)
	u.Total = u.Prompt + u.Completion
	model := in.Model
	if model == "" {
		model = "demo"
	}
	id := fmt.Sprintf("chatcmpl-%d", time.Now().UnixNano())
	if !in.Stream {
		var text []string
		for i := range u.Completion {
			text = append(text, words[i%len(words)])
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]string{"role": "assistant", "content": strings.Join(text, " ")}}},
			"usage": u,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	event := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	t := time.NewTicker(tokenDelay)
	defer t.Stop()
	for i := range u.Completion {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": words[i%len(words)] + " "}}}}
		if !event(chunk) {
			return
		}
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	if event(map[string]any{"id": id, "object": "chat.completion.chunk", "model": model, "choices": []any{}, "usage": u}) {
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	}
}
