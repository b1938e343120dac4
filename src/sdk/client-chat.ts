/**
 * The client's methods for chat, as the user of the client's token (`parley.with({ token })`):
 * rooms, messages, polls, members, and files uploaded straight into object storage. Apart from
 * the account's routes because they act as a user, not as the account.
 */
import type { ChatMessage, QueryOf, RequestBody } from "./api-types.js";
import { ParleyError } from "./errors.js";
import type { Transport } from "./transport.js";

export function chatMethods(transport: Transport) {
  const { api, ok } = transport;
  const chat = {
    rooms: () => ok(api.GET("/api/v1/messaging/rooms")),
    createRoom: (body: RequestBody<"/api/v1/messaging/rooms/create", "post">) =>
      ok(api.POST("/api/v1/messaging/rooms/create", { body })),
    room: (channelId: string) =>
      ok(api.GET("/api/v1/messaging/rooms/{channel_id}", { params: { path: { channel_id: channelId } } })),
    /** One page of the room's messages, newest first. */
    messages: (channelId: string, query: QueryOf<"/api/v1/messaging/rooms/{channel_id}/messages", "get"> = {}) =>
      ok(
        api.GET("/api/v1/messaging/rooms/{channel_id}/messages", {
          params: { path: { channel_id: channelId }, query },
        }),
      ),
    /** Every message of the room, newest first, a page of `pageSize` at a time. */
    allMessages: (channelId: string, pageSize = 100): AsyncGenerator<ChatMessage> =>
      byOffset(pageSize, async (size, offset) => {
        const page = await chat.messages(channelId, { size, offset });
        return "messages" in page ? page.messages : [];
      }),
    message: (channelId: string, messageId: number) =>
      ok(
        api.GET("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}", {
          params: { path: { channel_id: channelId, message_id: messageId } },
        }),
      ),
    editMessage: (channelId: string, messageId: number, content: string) =>
      ok(
        api.PUT("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}", {
          params: { path: { channel_id: channelId, message_id: messageId } },
          body: { content },
        }),
      ),
    deleteMessages: (channelId: string, body: RequestBody<"/api/v1/messaging/rooms/{channel_id}/messages", "delete">) =>
      ok(
        api.DELETE("/api/v1/messaging/rooms/{channel_id}/messages", {
          params: { path: { channel_id: channelId } },
          body,
        }),
      ),
    searchMessages: (
      channelId: string,
      query: QueryOf<"/api/v1/messaging/rooms/{channel_id}/messages/search", "get">,
    ) =>
      ok(
        api.GET("/api/v1/messaging/rooms/{channel_id}/messages/search", {
          params: { path: { channel_id: channelId }, query },
        }),
      ),
    replies: (
      channelId: string,
      messageId: number,
      query: QueryOf<"/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/messages_replies", "get"> = {},
    ) =>
      ok(
        api.GET("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/messages_replies", {
          params: { path: { channel_id: channelId, message_id: messageId }, query },
        }),
      ),
    vote: (channelId: string, messageId: number, optionId: number) =>
      ok(
        api.POST("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/poll/{poll_option_id}", {
          params: { path: { channel_id: channelId, message_id: messageId, poll_option_id: optionId } },
        }),
      ),
    votes: (channelId: string, messageId: number) =>
      ok(
        api.GET("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/poll/votes", {
          params: { path: { channel_id: channelId, message_id: messageId } },
        }),
      ),
    addUser: (channelId: string, userId: string) =>
      ok(
        api.POST("/api/v1/messaging/rooms/{channel_id}/users/{user_id}", {
          params: { path: { channel_id: channelId, user_id: userId } },
        }),
      ),
    removeUser: (channelId: string, userId: string) =>
      ok(
        api.DELETE("/api/v1/messaging/rooms/{channel_id}/users/{user_id}", {
          params: { path: { channel_id: channelId, user_id: userId } },
        }),
      ),
    roomUsers: (channelId: string) =>
      ok(api.GET("/api/v1/rooms/{channel_id}/users", { params: { path: { channel_id: channelId } } })),
    searchUsers: (query: QueryOf<"/api/v1/messaging/users/search", "get">) =>
      ok(api.GET("/api/v1/messaging/users/search", { params: { query } })),
  };
  return chat;
}
export type ChatMethods = ReturnType<typeof chatMethods>;

export function uploadMethods(transport: Transport) {
  const { api, ok } = transport;
  const uploads = {
    presign: (body: RequestBody<"/api/v1/misc/get-presigned", "post">) =>
      ok(api.POST("/api/v1/misc/get-presigned", { body })),
    /**
     * Presigns `fileName` for the bytes' size and PUTs them there with the content
     * type the signature names; resolves with the object's key.
     */
    upload: async (fileName: string, fileType: string, bytes: Blob | ArrayBuffer | Uint8Array): Promise<string> => {
      const fileSize = bytes instanceof Blob ? bytes.size : bytes.byteLength;
      const signed = await uploads.presign({ fileName, fileType, fileSize });
      // The bytes go to object storage, not to Parley: the global fetch, whatever reaches Parley.
      const put = await globalThis.fetch(signed.presigned_url, {
        method: "PUT",
        body: bytes as BodyInit,
        headers: { "content-type": signed.content_type },
      });
      if (!put.ok)
        throw new ParleyError(
          "upload_failed",
          `object storage answered ${put.status}: ${(await put.text()).slice(0, 200)}`,
          put.status,
        );
      return signed.key;
    },
  };
  return uploads;
}
export type UploadsMethods = ReturnType<typeof uploadMethods>;

/** Items of an offset-paged list, asked for `size` at a time until a short page. */
async function* byOffset<T>(size: number, page: (size: number, offset: number) => Promise<T[]>): AsyncGenerator<T> {
  for (let offset = 0; ; offset += size) {
    const items = await page(size, offset);
    yield* items;
    if (items.length < size) return;
  }
}
