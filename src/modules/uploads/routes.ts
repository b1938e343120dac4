/** `POST /api/v1/misc/get-presigned`: a URL the client PUTs a file to, straight into object storage. */
import { Elysia } from "elysia";
import { auth } from "../auth";
import { errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { UploadModel } from "./model";
import { presignUpload } from "./service";

export const uploadsController = new Elysia({ name: "parley.uploads", detail: { tags: ["messaging"] } })
  .use(auth)
  .use(limits)
  .post("/api/v1/misc/get-presigned", async ({ session, body }) => presignUpload(session.accountId, body), {
    bearer: "messaging",
    limit: "uploads",
    body: UploadModel.request,
    response: { 200: UploadModel.response, ...errorResponses(400, 401, 403, 422, 501, 503) },
    detail: { summary: "Presigned PUT URL into the account's object storage" },
  });
