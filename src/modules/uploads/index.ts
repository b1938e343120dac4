/** `POST /api/v1/misc/get-presigned`: a URL the client PUTs a file to, straight into object storage. */
import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { Text } from "../../http/text";
import { presignUpload } from "./service";

export const UploadModel = {
  request: t.Object({
    fileName: Text({ minLength: 1, maxLength: 512, description: "Path inside the account's folder, such as chat/photo.png" }),
    fileType: Text({ minLength: 1, maxLength: 255, description: 'Extension ("png") or MIME type ("image/png")' }),
  }),
  response: t.Object({
    presigned_url: t.String({ description: "PUT the file here, with the Content-Type given below" }),
    key: t.String({ description: "The object's key: the account id, a slash, then fileName" }),
    content_type: t.String(),
    expires_in: t.Integer({ description: "Seconds the URL stays valid" }),
  }),
};

export const uploadsController = new Elysia({ name: "parley.uploads", detail: { tags: ["messaging"] } }).use(auth).use(limits).post(
  "/api/v1/misc/get-presigned",
  async ({ session, body }) => presignUpload(session.accountId, body.fileName, body.fileType),
  {
    bearer: "messaging",
    limit: "uploads",
    body: UploadModel.request,
    response: { 200: UploadModel.response, ...errorResponses(400, 401, 403, 422, 503) },
    detail: { summary: "Presigned PUT URL into the account's object storage" },
  },
);
