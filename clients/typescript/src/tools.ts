/**
 * The memory tool (`update_short_term_memory`) as the sidecar renders it for each
 * `tools_format` (Python: `shortterm.tool.spec`, each shape pinned there by a golden test and
 * here by `test/client.test.ts` against a real sidecar). The OpenAPI document only says "an
 * object", so these are written by hand; they are type aliases, not interfaces, so each one is
 * also a `{ [key: string]: unknown }` and fits a provider library's own tool type.
 */

/** One argument of the tool: `summary`, or one per category. */
export type ToolProperty = {
  /** `"string"`; `["string", "null"]` in OpenAI's strict category mode; `"STRING"` for Gemini. */
  type: string | string[];
  description: string;
};

/** The tool's arguments as JSON Schema (OpenAI, Anthropic, MCP). */
export type ToolParameters = {
  type: "object";
  description: string;
  properties: { [argument: string]: ToolProperty };
  /** Every argument in summary mode and for OpenAI (strict); none in category mode otherwise. */
  required: string[];
  additionalProperties: false;
};

/** `tools_format: "openai"`: chat completions; fits the `openai` package's `ChatCompletionTool`. */
export type OpenAIToolSpec = {
  type: "function";
  function: { name: string; description: string; parameters: ToolParameters; strict: boolean };
};

/** `tools_format: "openai-responses"`: the function flattened into the tool. */
export type OpenAIResponsesToolSpec = {
  type: "function";
  name: string;
  description: string;
  parameters: ToolParameters;
  strict: boolean;
};

/** `tools_format: "anthropic"` (Messages API). */
export type AnthropicToolSpec = { name: string; description: string; input_schema: ToolParameters };

/** `tools_format: "gemini"`: a function declaration, in Gemini's OpenAPI subset. */
export type GeminiToolSpec = {
  name: string;
  description: string;
  parameters: {
    type: "OBJECT";
    description: string;
    properties: { [argument: string]: ToolProperty };
    /** Only in summary mode. */
    required?: string[];
  };
};

/** `tools_format: "mcp"`: as listed by `tools/list`. */
export type McpToolSpec = { name: string; description: string; inputSchema: ToolParameters };

/** The tool's shape for each `tools_format`. */
export type ToolSpecs = {
  openai: OpenAIToolSpec;
  "openai-responses": OpenAIResponsesToolSpec;
  anthropic: AnthropicToolSpec;
  gemini: GeminiToolSpec;
  mcp: McpToolSpec;
};

export type ToolsFormat = keyof ToolSpecs;
export type MessagesFormat = Exclude<ToolsFormat, "mcp">;

/** The tool in any format: what a turn's `tools` holds when the format is not known here. */
export type ToolSpec = ToolSpecs[ToolsFormat];

/**
 * The format the sidecar renders the tool in, as it decides: `tools_format`, else
 * `messages_format` when the request has messages (`P`, their type), else `"openai"`.
 * Distributes over unions: a format only known at run time gives the union of its shapes.
 */
export type ToolsFormatOf<TF, MF, P> = TF extends ToolsFormat
  ? TF
  : P extends readonly unknown[]
    ? MF extends MessagesFormat
      ? MF
      : "openai"
    : "openai";
