package modeltest

import (
	"strings"
)

// BodyCase is one request body and what a model forward with Kinds must do with it: pass
// it (Refused empty) or refuse it with a reason that holds Refused (the field's path, or
// a word of why the body as a whole is refused). One table drives the pure checker
// (rules/modelapi) and the forward end to end (router), so both read a body alike.
type BodyCase struct {
	Name    string
	Kinds   string // the forward's api, comma-separated; empty: the default ("openai,ollama")
	Path    string // the call it is posted to; empty: /v1/chat/completions
	Body    string
	Refused string
}

// chat wraps content parts in a chat completion request: messages[0].content.
func chat(parts string) string {
	return `{"model":"m","messages":[{"role":"user","content":[` + parts + `]}]}`
}

// responses wraps tools in a /v1/responses request: tools.
func responses(tools string) string {
	return `{"model":"m","input":"hi","tools":[` + tools + `]}`
}

const img = `data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==`

// BodyCases returns the table.
func BodyCases() []BodyCase {
	const exfil = `http://203.0.113.66/exfil?d=SECRET`
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	return []BodyCase{
		// What passes.
		{Name: "plain chat", Body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{Name: "a URL in the text is only text", Body: `{"model":"m","messages":[{"role":"user","content":"read ` + exfil + `"}]}`},
		{Name: "inline image", Body: chat(`{"type":"text","text":"what is it?"},{"type":"image_url","image_url":{"url":"` + img + `","detail":"auto"}}`)},
		{Name: "inline image, escaped", Body: chat(`{"type":"image_url","image_url":{"url":"\u0064ata:image/png;base64,AAAA"}}`)},
		{Name: "inline data holding a URL is data", Body: chat(`{"type":"image_url","image_url":{"url":"data:,` + exfil + `"}}`)},
		{Name: "a large inline image", Body: chat(`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUJD", 50_000) + `"}}`)},
		{Name: "null image_url", Body: chat(`{"type":"image_url","image_url":null}`)},
		{Name: "a url key outside a fetched field", Body: `{"model":"m","url":"https://example.com/","metadata":{"url":"x"}}`},
		{Name: "a web search call record fed back", Path: "/v1/responses", Body: `{"model":"m","input":[{"type":"web_search_call","id":"ws_1","status":"completed"}]}`},
		{Name: "a function tool", Path: "/v1/responses", Body: responses(`{"type":"function","name":"f","parameters":{"type":"object","properties":{"url":{"type":"string"}}}}`)},
		{Name: "empty body", Body: ``},
		{Name: "white space around", Body: " \r\n\t{\"model\":\"m\"} \n"},
		{Name: "nested 100 deep", Body: `{"a":` + deep(99) + `}`},
		{Name: "numbers and literals", Body: `{"a":[0,-1.5e+3,2E-2,true,false,null,"\"\\\/\b\f\n\r\t"]}`},
		{Name: "a key matching no name", Body: chat(`{"type":"image_url","image_url\ud800":"` + exfil + `"}`)},
		{Name: "ollama kind: web search tool", Kinds: "ollama", Path: "/v1/responses", Body: responses(`{"type":"web_search_preview"}`)},
		{Name: "llamacpp kind: mcp tool", Kinds: "llamacpp", Path: "/v1/responses", Body: responses(`{"type":"mcp","server_label":"x"}`)},
		{Name: "llamacpp kind: audio_url", Kinds: "llamacpp", Body: chat(`{"type":"audio_url","audio_url":{"url":"` + exfil + `"}}`)},
		{Name: "generic: words that only hold the letters", Kinds: "generic", Body: `{"model":"m","security":"` + exfil + `","during":"` + exfil + `"}`},
		{Name: "openai kind: a source url", Kinds: "openai", Body: chat(`{"type":"image","source":{"type":"url","url":"` + exfil + `"}}`)},

		// What the server would fetch.
		{Name: "image_url to an outside address", Body: chat(`{"type":"image_url","image_url":{"url":"` + exfil + `"}}`), Refused: "messages[0].content[0].image_url.url"},
		{Name: "image_url as a string", Body: chat(`{"type":"image_url","image_url":"` + exfil + `"}`), Refused: "messages[0].content[0].image_url"},
		{Name: "file:// image", Kinds: "llamacpp", Body: chat(`{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}`), Refused: "image_url.url"},
		{Name: "second content part", Body: chat(`{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"https://x.example/a.png"}}`), Refused: "messages[0].content[1].image_url.url"},
		{Name: "escaped key", Body: chat(`{"type":"image_url","image\u005furl":{"url":"` + exfil + `"}}`), Refused: "image_url.url"},
		{Name: "upper-case keys", Body: chat(`{"type":"image_url","IMAGE_URL":{"URL":"` + exfil + `"}}`), Refused: "IMAGE_URL.URL"},
		{Name: "long s in a key", Kinds: "vllm", Path: "/v1/responses", Body: responses(`{"type":"function","\u017Ferver_url":"` + exfil + `"}`), Refused: "tools[0]"},
		{Name: "duplicate url, data first", Body: chat(`{"type":"image_url","image_url":{"url":"` + img + `","url":"` + exfil + `"}}`), Refused: "image_url.url"},
		{Name: "duplicate image_url", Body: chat(`{"type":"image_url","image_url":{"url":"` + img + `"},"image_url":{"url":"` + exfil + `"}}`), Refused: "image_url.url"},
		{Name: "escaped value", Body: chat(`{"type":"image_url","image_url":{"url":"\u0068ttp://203.0.113.66/"}}`), Refused: "image_url.url"},
		{Name: "leading space", Body: chat(`{"type":"image_url","image_url":{"url":" data:image/png;base64,AAAA"}}`), Refused: "image_url.url"},
		{Name: "upper-case DATA:", Body: chat(`{"type":"image_url","image_url":{"url":"DATA:image/png;base64,AAAA"}}`), Refused: "image_url.url"},
		{Name: "data: with a URL for a header", Body: chat(`{"type":"image_url","image_url":{"url":"data:` + exfil + `"}}`), Refused: "image_url.url"},
		{Name: "data: with no comma", Body: chat(`{"type":"image_url","image_url":{"url":"data:image/png;base64"}}`), Refused: "image_url.url"},
		{Name: "empty url", Body: chat(`{"type":"image_url","image_url":{"url":""}}`), Refused: "image_url.url"},
		{Name: "nested arrays", Body: chat(`{"type":"image_url","image_url":[["` + exfil + `"]]}`), Refused: "image_url[0][0]"},
		{Name: "nested objects", Body: chat(`{"type":"image_url","image_url":{"url":{"url":"` + exfil + `"}}}`), Refused: "image_url.url.url"},
		{Name: "vllm audio_url", Body: chat(`{"type":"audio_url","audio_url":{"url":"` + exfil + `"}}`), Refused: "audio_url.url"},
		{Name: "vllm video_url", Kinds: "vllm", Body: chat(`{"type":"video_url","video_url":{"url":"` + exfil + `"}}`), Refused: "video_url.url"},
		{Name: "input_image", Path: "/v1/responses", Body: `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + exfil + `"}]}]}`, Refused: "input[0].content[0].image_url"},
		{Name: "input_file", Path: "/v1/responses", Body: `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_url":"` + exfil + `"}]}]}`, Refused: "input[0].content[0].file_url"},
		{Name: "mcp tool with a server_url", Path: "/v1/responses", Body: responses(`{"server_url":"` + exfil + `","type":"mcp","server_label":"x"}`), Refused: "tools[0].server_url"},
		{Name: "mcp tool by label", Kinds: "lmstudio", Path: "/v1/responses", Body: responses(`{"type":"mcp","server_label":"x"}`), Refused: "tools[0].type"},
		{Name: "web search tool", Kinds: "vllm", Path: "/v1/responses", Body: responses(`{"type":"web_search_preview"}`), Refused: "tools[0].type"},
		{Name: "code interpreter tool", Path: "/v1/responses", Body: responses(`{"type":"Code_Interpreter","container":{"type":"auto"}}`), Refused: "tools[0].type"},
		{Name: "ollama kind: image_url", Kinds: "ollama", Body: chat(`{"type":"image_url","image_url":{"url":"` + exfil + `"}}`), Refused: "image_url.url"},
		{Name: "generic: a source url", Kinds: "generic", Body: chat(`{"type":"image","source":{"type":"url","url":"` + exfil + `"}}`), Refused: "source.url"},
		{Name: "generic: any uri key", Kinds: "generic", Body: `{"model":"m","callback_URI":"` + exfil + `"}`, Refused: "callback_URI"},
		{Name: "generic: a camel-case url key", Kinds: "generic", Body: `{"model":"m","meta":{"imageUrls":["` + exfil + `"]}}`, Refused: "meta.imageUrls[0]"},
		{Name: "a violation after 100 KB", Body: `{"model":"m","pad":"` + strings.Repeat("p", 100<<10) + `","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + exfil + `"}}]}]}`, Refused: "messages[0].content[0].image_url.url"},

		// What is not one JSON value.
		{Name: "a second value", Body: `{"model":"m"}` + chat(`{"type":"image_url","image_url":"`+exfil+`"}`), Refused: "JSON"},
		{Name: "trailing garbage", Body: `{"model":"m"} x`, Refused: "JSON"},
		{Name: "a comment", Body: `{"model":"m" /* c */}`, Refused: "JSON"},
		{Name: "a line comment", Body: "// c\n{\"model\":\"m\"}", Refused: "JSON"},
		{Name: "trailing comma", Body: `{"model":"m",}`, Refused: "JSON"},
		{Name: "single quotes", Body: `{'model':'m'}`, Refused: "JSON"},
		{Name: "NaN", Body: `{"t":NaN}`, Refused: "JSON"},
		{Name: "leading zero", Body: `{"t":01}`, Refused: "JSON"},
		{Name: "byte-order mark", Body: "\xef\xbb\xbf{\"model\":\"m\"}", Refused: "JSON"},
		{Name: "UTF-16", Body: "\xff\xfe{\x00\"\x00a\x00\"\x00:\x001\x00}\x00", Refused: "JSON"},
		{Name: "a control byte in a string", Body: "{\"model\":\"m\x01\"}", Refused: "JSON"},
		{Name: "a bad escape", Body: `{"model":"\x41"}`, Refused: "JSON"},
		{Name: "cut short", Body: `{"model":"m","messages":[`, Refused: "ends before"},
		{Name: "form-encoded", Body: `model=m&image_url=` + exfil, Refused: "JSON"},
		{Name: "nested 129 deep", Body: deep(129), Refused: "deeper than 128"},
		{Name: "nested a million deep", Body: strings.Repeat("[", 1<<20), Refused: "deeper than 128"},
	}
}
