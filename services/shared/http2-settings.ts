/**
 * Both ends of the gateway → LinkService connection: a larger window than
 * HTTP/2's 64 KiB, so that the stream of batches (a batch of creates can
 * pass 100 KiB, and several are in flight) never waits for a window update.
 */
export const HTTP2_SETTINGS = { settings: { initialWindowSize: 4 * 1024 * 1024 } };
